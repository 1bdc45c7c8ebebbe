"""No profile turns a slow example into a verdict: none has a deadline, and each one passes the
slowest properties (a transformers model's forward per example) for a policy expected to hold.

Hypothesis's own default deadline (200 ms an example) made ``verify --hypothesis-profile replay``
report the built-in ``mrv2`` as failing (DeadlineExceeded) on a loaded machine. How long a call
into user code may take is bounded by its worker's ``--call-timeout``, never by a profile.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import settings as hypothesis_settings

from crossattn_sizing.base.settings import PROFILES
from crossattn_sizing.runs import profiles
from tests.processes import kill_group

PROPERTIES = Path(__file__).resolve().parents[1] / "properties"


def derived_profiles() -> list[str]:
    """Every profile a run may load besides the six: ``--max-examples`` children, fuzz's rounds and
    the engine budget (each built from the loaded one)."""
    from crossattn_sizing.commands.fuzz import set_up_rounds
    from crossattn_sizing.engine.budget import PROFILE, load_engine_budget

    names = [profiles.with_max_examples(name, 3) for name in PROFILES]
    set_up_rounds(SimpleNamespace(examples_per_round=5), None, None)  # type: ignore[arg-type]
    names.append("fuzz-round")
    before = hypothesis_settings.get_current_profile_name()
    try:
        for name in PROFILES:  # the engine budget is made from whichever profile is loaded
            hypothesis_settings.load_profile(name)
            load_engine_budget()
            assert hypothesis_settings.get_profile(PROFILE).deadline is None, f"engine budget over {name}"
    finally:
        hypothesis_settings.load_profile(before)
    return names


def test_no_profile_of_the_harness_has_a_deadline() -> None:
    profiles.register_profiles()
    for name in [*PROFILES, *derived_profiles()]:
        assert hypothesis_settings.get_profile(name).deadline is None, name


def deadline_arguments(source: str) -> list[int]:
    """The lines where a call passes ``deadline=`` (Hypothesis's ``settings(deadline=...)`` among them).

    A keyword, not the word: a property may pass a worker's call deadline along by position
    (properties/sglang_attention.py), which is no Hypothesis deadline.
    """
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and any(k.arg == "deadline" for k in node.keywords)]  # fmt: skip


def test_no_property_sets_a_deadline_of_its_own() -> None:
    """A property's own ``@settings(deadline=...)`` would bring one back under every profile."""
    for path in sorted(PROPERTIES.rglob("*.py")):
        assert deadline_arguments(path.read_text()) == [], f"{path.name} passes a deadline"


def test_the_deadline_check_sees_a_settings_deadline() -> None:
    """Meta-test: the check above flags a property decorated with its own deadline."""
    source = "@settings(max_examples=5, deadline=200)\ndef test_x() -> None:\n    pass\n"
    assert deadline_arguments(source) == [1]
    assert deadline_arguments("worker = Worker(builder.name, builder.deadline)\n") == []


def busy_cores() -> list[subprocess.Popen[bytes]]:
    """A spinning process per core (at most 4), each ending by itself once this process is gone."""
    spin = f"import os\nwhile os.getppid() == {os.getpid()}:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(min(4, os.cpu_count() or 1))]


def verify_argv(profile: str, out: Path) -> list[str]:
    """The issue's command under ``profile``, one example per property, its report written to ``out``."""
    return ["verify", "--policy", "mrv2", "--hypothesis-profile", profile, "--max-examples", "1",
            "-k", "cross_attention_matches_transformers", "--json", str(out)]  # fmt: skip


@pytest.fixture(scope="module")
def verified(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, Path]]:
    """Every profile's run, all at once beside a spinning process per core: profile -> (exit status,
    the tail of its output, its JSON report).

    At once, not one after another: each run still has every core busy (the spinners and the other
    runs), and the six imports of torch and transformers overlap instead of adding up (the module took
    six times one run's wall time).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSATTN_")}
    runs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    busy = busy_cores()
    try:
        for profile in PROFILES:
            folder = tmp_path_factory.mktemp(f"verify-{profile}")
            own = dict(env, CROSSATTN_DB=str(folder / "examples"))  # dev, nightly, gpu and reuse keep one
            argv = [sys.executable, "-m", "crossattn_sizing", *verify_argv(profile, folder / "verify.json")]
            with open(folder / "said.txt", "wb") as said:  # a file, not a pipe: no run waits on a reader
                runs[profile] = (subprocess.Popen(argv, cwd=folder, env=own, stdout=said, stderr=said,
                                                  start_new_session=True), folder)  # fmt: skip
        done = {}
        for profile, (proc, folder) in runs.items():
            proc.wait(timeout=900)
            said = (folder / "said.txt").read_text(errors="replace")
            done[profile] = (proc.returncode, said[-6000:], folder / "verify.json")
        return done
    finally:
        for proc, _ in runs.values():
            kill_group(proc)  # the run and any worker it started, whatever happened above
        for spinner in busy:
            spinner.kill()
            spinner.wait()


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_passes_the_transformers_properties_for_mrv2_with_every_core_busy(
    profile: str, verified: dict[str, tuple[int, str, Path]]
) -> None:
    """The issue's command under each profile, one example per property (the pinned one where the
    profile runs only those): every property holds, exit 0. Nothing here reads a clock."""
    returncode, said, out = verified[profile]
    assert returncode == 0, said
    report = json.loads(out.read_text())
    assert report["profile"] == profile
    found = report["policies"][0]["properties"]
    assert len(found) >= 3, said  # bart, mbart and whisper at least (the transformers families)
    for prop in found:
        assert prop["outcome"] == "holds" and prop["examples"] >= 1, prop


def test_verify_writes_nothing_into_the_working_folder(tmp_path: Path) -> None:
    """Hypothesis keeps its files (its constants cache, its default database) under ``.hypothesis`` in
    the working folder unless told otherwise: ``verify`` in an engine checkout left untracked
    ``.hypothesis/constants`` there. They go to the harness's cache (``hypothesis/``), here an empty
    HOME's; under the ``dev`` profile the example database goes there too."""
    cwd, home = tmp_path / "checkout", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CROSSATTN_", "HYPOTHESIS_"))}
    env.pop("XDG_CACHE_HOME", None)
    env["HOME"] = str(home)
    argv = [sys.executable, "-m", "crossattn_sizing", "verify", "--policy", "mrv2", "--hypothesis-profile",
            "dev", "--max-examples", "2", "-k", "test_coverage", "--jobs", "1", "--json", str(tmp_path / "v")]
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    try:
        said = proc.communicate(timeout=900)[0].decode(errors="replace")
    finally:
        kill_group(proc)  # type: ignore[arg-type]
    assert proc.returncode == 0, said[-3000:]
    assert sorted(p.name for p in cwd.iterdir()) == [], said[-3000:]
    storage = home / ".cache" / "crossattn-sizing" / "hypothesis"
    assert any((storage / "constants").iterdir()), "Hypothesis wrote its constants nowhere this test looked"
    report = json.loads((tmp_path / "v").read_text())
    assert report["database"] == str(storage / "examples")


def test_hypothesis_storage_follows_its_own_variable_and_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HYPOTHESIS_STORAGE_DIRECTORY`` where the user set it (Hypothesis's own variable), else the
    harness's cache; the default example database lies inside it, never in the working folder."""
    from hypothesis.configuration import storage_directory

    from crossattn_sizing.base import settings

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(settings.HYPOTHESIS_STORAGE, raising=False)
    monkeypatch.delenv(settings.DB, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    ours = tmp_path / "cache" / "crossattn-sizing" / "hypothesis"
    try:
        profiles.register_profiles()
        assert storage_directory("constants").path == ours / "constants"
        assert profiles.default_database_dir() == ours / "examples"
        monkeypatch.setenv(settings.HYPOTHESIS_STORAGE, str(tmp_path / "mine"))
        profiles.place_hypothesis_storage()
        assert storage_directory("constants").path == tmp_path / "mine" / "constants"
        assert profiles.default_database_dir() == tmp_path / "mine" / "examples"
    finally:
        monkeypatch.undo()
        profiles.register_profiles()  # the session's own storage and databases again
    assert not (tmp_path / ".hypothesis").exists()
