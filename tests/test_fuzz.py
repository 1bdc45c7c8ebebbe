"""The fuzzer end to end: what it finds becomes a regression file that later runs replay.

Every run here has a budget in rounds (``--max-rounds``) and a seed, so what it
does is the same on an idle laptop and on a loaded CI box; the time budget is
set far above anything these runs need and is never what ends them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crossattn_sizing.commands.cli import main
from tests.processes import cli, run

pytestmark = pytest.mark.slow

NEVER_REACHED = "600"  # minutes: the round budget ends every run here first


def fuzz(tmp_path: Path, policy: str, rounds: int) -> tuple[subprocess.CompletedProcess[str], Path]:
    regressions = tmp_path / "regressions"
    proc = run(cli(
        "fuzz", "--minutes", NEVER_REACHED, "--max-rounds", str(rounds), "--seed", "0", "--policy", policy,
        "--regressions", str(regressions), "--db", str(tmp_path / "db"), "-k", "test_capacity",
        "--examples-per-round", "150", "--json", str(tmp_path / "summary.json"),
    ))  # fmt: skip
    return proc, regressions


def replay(regressions: Path, policy: str) -> subprocess.CompletedProcess[str]:
    """A plain run of the capacity properties that only replays pinned examples."""
    return run(
        [sys.executable, "-m", "pytest", "properties/test_capacity.py", "--policy", policy,
         "--hypothesis-profile", "replay", "-p", "no:cacheprovider", "-q"],
        env={"CROSSATTN_REGRESSIONS_DIR": str(regressions)},
    )  # fmt: skip


def test_fuzzing_the_prefix_sizing_writes_a_nemotron_shaped_regression(tmp_path: Path) -> None:
    # The run ends as soon as every property fails (round 1 with this seed); 3 rounds only bound it.
    proc, regressions = fuzz(tmp_path, "mrv2-prefix", rounds=3)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "fuzz summary" in proc.stdout and "new regression files" in proc.stdout
    files = sorted(regressions.glob("*.json"))
    assert files, proc.stdout
    data = json.loads(files[0].read_text())
    assert data["meta"]["policy"] == "mrv2-prefix"
    assert "max_source_positions" not in data["config"]  # absent: the Nemotron-Parse shape
    assert max(data["encoder_lens"]) > data["config"]["max_model_len"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["new_regressions"] and all(p["outcome"] == "fails" for p in summary["properties"])
    assert summary["exit_status"] == 1 and summary["interrupted"] is False


def test_a_found_failure_is_replayed_by_the_next_plain_run(tmp_path: Path) -> None:
    # This broken policy passes every hand-pinned case (all have dcp_size 1), so a
    # failing replay can only come from the file the fuzzer wrote.
    policy = "tests.broken_policies:dcp_on_replicated"
    assert replay(tmp_path / "empty", policy).returncode == 0
    proc, regressions = fuzz(tmp_path, policy, rounds=3)
    assert list(regressions.glob("*.json")), proc.stdout + proc.stderr
    replayed = replay(regressions, policy)
    assert replayed.returncode == 1, replayed.stdout
    assert "Failing explicit example" in replayed.stdout
    assert replay(regressions, "mrv2").returncode == 0  # the fixed sizing holds on the same case


def test_fuzzing_the_fixed_sizing_writes_nothing_and_reports_its_budget(tmp_path: Path) -> None:
    proc, regressions = fuzz(tmp_path, "mrv2", rounds=1)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not list(regressions.glob("*.json"))
    assert "no new regression files" in proc.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rounds"] == 1 and summary["exit_status"] == 0
    assert all(p["examples"] > 0 and p["outcome"] == "holds" for p in summary["properties"])
    assert any("S absent" in p["events"] for p in summary["properties"])


def test_a_spent_time_budget_ends_the_run_normally(tmp_path: Path) -> None:
    """About the clock, so with wide margins: a 0.01-minute budget and rounds without end.

    The budget is checked between tests; the run ends after the first test
    past it, reports what ran and exits as a finished run, never as Ctrl-C.
    """
    regressions = tmp_path / "regressions"
    proc = run(cli(
        "fuzz", "--minutes", "0.01", "--policy", "mrv2", "--regressions", str(regressions),
        "--db", str(tmp_path / "db"), "-k", "test_capacity", "--examples-per-round", "50",
        "--json", str(tmp_path / "summary.json"),
    ))  # fmt: skip
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["interrupted"] is False, proc.stdout + proc.stderr
    assert summary["rounds"] >= 1
    assert proc.returncode in (0, 3) and proc.returncode == summary["exit_status"]  # 3: a test never reached
    assert all(p["outcome"] in ("holds", "not run") for p in summary["properties"])


OWN_TEST_VARIABLE = "PYTEST_CURRENT_TEST"
"""pytest's name of the running test: the inner run clears the outer run's (pytest's doing, not fuzz's)."""


def environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != OWN_TEST_VARIABLE}


def test_an_in_process_run_leaves_the_environment_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fuzz hands its folders to the suite as the plugin's options, so the process's environment
    (what the user set, read only by ``crossattn_sizing.base.settings``) is the same after the run."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # the suite's hub guard sets them when unset
        monkeypatch.setenv(name, os.environ.get(name, "1"))
    before = environment()
    argv = ["fuzz", "--minutes", NEVER_REACHED, "--max-rounds", "1", "--seed", "0", "--policy", "mrv2",
            "--regressions", str(tmp_path / "regressions"), "--db", str(tmp_path / "db"),
            "-k", "test_capacity", "--examples-per-round", "5"]  # fmt: skip
    assert main(argv) == 0
    assert environment() == before


def test_the_regressions_folder_reaches_the_suite_as_an_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder holding a broken regression file stops the run: the suite read the folder fuzz named."""
    folder = tmp_path / "regressions"
    folder.mkdir()
    (folder / "test_coverage-broken.json").write_text(json.dumps({"config": {"max_model_len": 1},
                                                                  "encoder_lens": [1]}))  # fmt: skip
    argv = ["fuzz", "--max-rounds", "1", "--policy", "mrv2", "--regressions", str(folder),
            "--db", str(tmp_path / "db"), "-k", "test_capacity", "--examples-per-round", "5"]  # fmt: skip
    assert main(argv) == 2
    assert "regression file" in capsys.readouterr().err
    assert "CROSSATTN_REGRESSIONS_DIR" not in os.environ
