"""The SGLang release-range table (engine/sglang/releases.py): which range a tree is run with.

No download: trees here are folders holding only the files and definitions a
range names (or a version file), which is all the choice looks at. That each
range's steps really run is shown on the recorded tree (tests/test_sglang_engine.py)
and on every real release by `nox -s engine` (tests/test_sglang_real.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.engine.sglang.releases import (
    AUDIT_RELEASES,
    FIRST_OVERFLOW,
    KNOWN_READ_FAILURES,
    RANGES,
    SglangRange,
    range_for,
    version_key,
)
from tests.sglang_tree import FIXTURE


def _layout(root: Path, rng: SglangRange) -> Path:
    """A tree holding exactly the definitions ``rng`` names, each in its file."""
    files: dict[str, dict[str, list[str]]] = {}
    for step in (*rng.steps.values(), rng.kernel):
        cls, _, method = step.name.partition(".")
        files.setdefault(step.file, {}).setdefault(cls, [])
        if method:
            files[step.file][cls].append(method)
    for rel, defs in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        text = [f"class {n}:\n" + "".join(f"    def {m}(self):\n        pass\n" for m in ms) if ms
                else f"def {n}():\n    pass\n" for n, ms in defs.items()]
        path.write_text("\n".join(text))
    return root


def _versioned(root: Path, version: str) -> Path:
    (root / "sglang").mkdir(parents=True)
    (root / "sglang/_version.py").write_text(f"__version__ = version = '{version}'\n")
    return root


def test_ranges_are_newest_first_and_do_not_overlap() -> None:
    keys = [(version_key(r.first), version_key(r.last)) for r in RANGES]
    assert all(first <= last for first, last in keys)
    assert all(keys[i][0] > keys[i + 1][1] for i in range(len(keys) - 1))


@pytest.mark.parametrize("version", AUDIT_RELEASES)
def test_every_audited_release_has_a_range(tmp_path: Path, version: str) -> None:
    rng, chosen = range_for(_versioned(tmp_path, version))
    assert version_key(rng.first) <= version_key(version) <= version_key(rng.last)
    assert f"sglang {version} (sglang/_version.py)" in chosen


@pytest.mark.parametrize("rng", RANGES, ids=[r.label() for r in RANGES])
def test_a_tree_without_a_version_gets_the_range_whose_steps_it_holds(tmp_path: Path,
                                                                      rng: SglangRange) -> None:
    # Ranges that place every step alike (0.5.16 .. 0.5.17 and 0.5.18 .. 0.5.21 differ only in whether the
    # row sizing takes server_args) cannot be told apart without a version file: the newer is taken.
    same = next(r for r in RANGES if r.steps == rng.steps and r.kernel == rng.kernel)
    assert range_for(_layout(tmp_path, rng))[0] is same


def test_the_recorded_tree_is_the_newest_range() -> None:
    rng, chosen = range_for(FIXTURE)
    assert rng is RANGES[0] and chosen.startswith("no sglang/_version.py")


def test_a_newer_release_runs_with_the_newest_range_and_says_so(tmp_path: Path) -> None:
    rng, chosen = range_for(_versioned(tmp_path, "0.6.0"))
    assert rng is RANGES[0] and "newer than the table's last release" in chosen


def test_an_older_release_and_an_unknown_tree_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ReleaseUnavailable, match="older than the first release the harness runs"):
        range_for(_versioned(tmp_path / "old", "0.4.9"))
    (tmp_path / "bare/sglang").mkdir(parents=True)
    with pytest.raises(ReleaseUnavailable, match="matches no release range; for the newest"):
        range_for(tmp_path / "bare")


def test_version_order_counts_post_releases() -> None:
    assert version_key("0.5.13") < version_key("0.5.13.post1") < version_key("0.5.14")


def test_known_read_failures_start_at_the_first_overflow() -> None:
    assert f"sglang=={FIRST_OVERFLOW}" in KNOWN_READ_FAILURES and "sglang==0.5.23" in KNOWN_READ_FAILURES
    assert "sglang==0.5.12.post1" not in KNOWN_READ_FAILURES
