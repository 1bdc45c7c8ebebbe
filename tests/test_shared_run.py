"""verify's shared run (crossattn_sizing.runs.shared_run): the same verdicts as separate runs, and it says so.

The claim the shared run rests on: under the ci profile Hypothesis draws the
same examples for each policy while it passes, so judging all policies in
one run and running again alone whatever a policy failed gives each policy
the verdict, example count and diagnosis its own run gives. The end-to-end
tests compare the two on the capacity and sharded-DCP properties, a broken
policy (expected to hold, so it is run again alone) included.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.core.policies import BUILTIN_POLICIES
from crossattn_sizing.runs.shared_run import (
    POLICY_FREE,
    SAME_ANSWERS,
    RecordingPolicy,
    ReplayData,
    _Diverged,
    answers_equal,
)

SELECT = "test_capacity or test_sharded_cross_path or test_column_of"
POLICIES = ["mrv2", "v1", "mrv2-prefix", "tests.broken_policies:floor_div"]
CONFIG = RunnerConfig(
    max_model_len=2048, max_num_batched_tokens=4096,
    groups=(KVCacheGroup(GroupKind.FULL, 16), KVCacheGroup(GroupKind.CROSS, 16)),
)  # fmt: skip


def verify(tmp_path: Path, name: str, *policies: str, examples: int = 30) -> tuple[int, dict[str, Any]]:
    out = tmp_path / f"{name}.json"
    args = [a for p in policies for a in ("--policy", p)]
    proc = subprocess.run(
        [sys.executable, "-m", "crossattn_sizing", "verify", *args, "-k", SELECT,
         "--max-examples", str(examples), "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.exists(), proc.stdout + proc.stderr
    return proc.returncode, json.loads(out.read_text())


def by_property(policy: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in policy["properties"]}


def test_shared_verdicts_equal_separate_runs(tmp_path: Path) -> None:
    code, shared = verify(tmp_path, "shared", *POLICIES)
    assert code == 1  # floor_div is expected to hold and fails
    assert any("shared run" in note for note in shared["notes"])
    for i, spec in enumerate(POLICIES):
        _, alone = verify(tmp_path, f"alone{i}", spec)
        mine = next(p for p in shared["policies"] if p["policy"] == alone["policies"][0]["policy"])
        assert mine["verdict"] == alone["policies"][0]["verdict"], spec
        theirs = by_property(alone["policies"][0])
        for name, prop in by_property(mine).items():
            assert prop["outcome"] == theirs[name]["outcome"], (spec, name)
            if prop["outcome"] == "holds":
                assert prop["examples"] == theirs[name]["examples"], (spec, name)
            if prop["outcome"] == "fails" and spec != "mrv2-prefix":  # run again alone: the same diagnosis
                assert prop["diagnosis"] == theirs[name]["diagnosis"], (spec, name)


def test_what_was_shared_is_said_per_property(tmp_path: Path) -> None:
    # The ci profile's full 200, not 30: the "not shrunk" path below needs mrv2-prefix to meet a failing
    # generated example of the sharded property, and where it first does depends on the draws, which
    # the ci profile seeds from the property's source (an edit to its body moved it from between 30 and
    # 60 to past 60). These capacity-level properties take seconds at 200.
    _, report = verify(tmp_path, "marks", "mrv2", "mrv2-prefix", examples=200)
    mrv2 = by_property(report["policies"][0])
    assert mrv2["test_admission::test_column_of_is_the_oracle_column"]["shared"] == POLICY_FREE
    assert mrv2["test_capacity::test_coverage"]["shared"] == SAME_ANSWERS
    prefix = by_property(report["policies"][1])
    # A pinned (explicit) example failed: run again alone at once, the diagnosis is its own run's.
    coverage = prefix["test_capacity::test_coverage"]
    assert coverage["outcome"] == "fails" and coverage["shared"] == "" and not coverage["reason"]
    assert "token 2048 is the first without a column" in coverage["diagnosis"]
    # Expected to fail, a generated example failed: that example is kept (not shrunk), saying so.
    sharded = prefix["test_dcp_finding::test_sharded_cross_path_fits"]
    assert sharded["outcome"] == "fails" and "not shrunk" in sharded["reason"]
    assert "sharded cross-attention does not fit under mrv2-prefix" in sharded["diagnosis"]


def test_a_single_policy_runs_alone_and_claims_no_sharing(tmp_path: Path) -> None:
    _, report = verify(tmp_path, "single", "mrv2")
    assert all(p["shared"] == "" for p in report["policies"][0]["properties"])


def test_equal_answers_share_and_different_ones_do_not() -> None:
    recording = RecordingPolicy(BUILTIN_POLICIES["mrv2"])
    recording(CONFIG)
    assert recording.name == "mrv2"
    assert answers_equal(BUILTIN_POLICIES["mrv2-pow2"], recording.calls)  # same on a power-of-two block
    assert not answers_equal(BUILTIN_POLICIES["mrv2-prefix"], recording.calls)

    def raises(config: RunnerConfig) -> tuple[int, ...]:
        raise RuntimeError("no")

    assert not answers_equal(raises, recording.calls)


class _Data:
    def __init__(self) -> None:
        self.n = 0

    def draw(self, strategy: object, label: object = None) -> int:
        self.n += 1
        return self.n


def test_draws_are_replayed_in_order_and_a_relabelled_draw_diverges() -> None:
    tape: list[tuple[object, object]] = []
    first = ReplayData(_Data(), tape)
    assert [first.draw(None, "a"), first.draw(None, "b")] == [1, 2]
    again = ReplayData(_Data(), tape)
    assert again.draw(None, "a") == 1 and again.used == 1
    other = ReplayData(_Data(), tape)
    with pytest.raises(_Diverged):
        other.draw(None, "b")


def test_the_suite_is_split_by_weight_and_every_test_runs_once() -> None:
    """Every test of the suite runs in exactly one share, the two heavy attention tests in different ones,
    and every weighted unit names a test or file that exists (a stale weight would unbalance the split)."""
    import ast

    from crossattn_sizing.runs.share_process import SHARED_WEIGHTS, split_shared, suite_units
    from crossattn_sizing.runs.suite import properties_dir

    files = sorted(properties_dir().glob("test_*.py"))
    tests = {f"{f.name}::{n.name}" for f in files for n in ast.parse(f.read_text()).body
             if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}  # fmt: skip
    assert set(SHARED_WEIGHTS) <= set(suite_units(files, SHARED_WEIGHTS)), set(SHARED_WEIGHTS)
    parts = split_shared(files, 2)
    assert len(parts) == 2 and all(parts)
    units = [u for p in parts for u in p]
    assert len(units) == len(set(units))
    ran = [t for t in tests if t in units] + [t for t in tests if t.split("::")[0] in units]
    assert sorted(ran) == sorted(tests)  # each test once: by name, or with its whole file
    heavy = {"test_attention.py::test_cross_attention_matches_dense",
             "test_attention.py::test_self_attention_matches_dense"}  # fmt: skip
    assert all(heavy - set(p) for p in parts), parts
    assert split_shared(files[:1], 3) == [[files[0].name]]  # no empty share


def test_jobs_below_one_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    from crossattn_sizing.commands.cli import main

    assert main(["verify", "--policy", "mrv2", "--jobs", "0"]) == 2
    err = capsys.readouterr().err
    assert "--jobs" in err and len(err.strip().splitlines()) == 1


def test_a_failure_shared_with_another_policy_names_its_own_policy(tmp_path: Path) -> None:
    """mrv2-prefix-gcd answers as mrv2-prefix at power-of-two block sizes, so their turns are shared;
    the failing example kept for mrv2-prefix-gcd must replay mrv2-prefix-gcd, never mrv2-prefix."""
    _, report = verify(tmp_path, "named", "mrv2-prefix", "mrv2-prefix-gcd", examples=200)
    gcd = by_property(report["policies"][1])
    failed = {name: p for name, p in gcd.items() if p["outcome"] == "fails"}
    assert failed, gcd  # it is expected to fail: a run where it does not proves nothing here
    for name, prop in failed.items():
        said = prop["diagnosis"] + "\n" + prop["reproduce"] + "\n" + prop["reason"]
        assert "--policy mrv2-prefix " not in said and "under mrv2-prefix " not in said, (name, said)
        if prop["reproduce"].startswith("crossattn-sizing check"):
            assert "--policy mrv2-prefix-gcd " in prop["reproduce"], (name, prop["reproduce"])
