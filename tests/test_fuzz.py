"""The fuzzer end to end: what it finds becomes a regression file that later runs replay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def fuzz(tmp_path: Path, policy: str, minutes: str = "0.08") -> tuple[subprocess.CompletedProcess[str], Path]:
    regressions = tmp_path / "regressions"
    proc = subprocess.run(
        [
            sys.executable, "-m", "crossattn_sizing", "fuzz", "--minutes", minutes, "--policy", policy,
            "--regressions", str(regressions), "--db", str(tmp_path / "db"), "-k", "test_capacity",
            "--examples-per-round", "150", "--json", str(tmp_path / "summary.json"),
        ],
        capture_output=True, text=True, timeout=600,
    )
    return proc, regressions


def replay(regressions: Path, policy: str) -> subprocess.CompletedProcess[str]:
    """A plain run of the capacity properties that only replays pinned examples."""
    env = dict(os.environ, CROSSATTN_REGRESSIONS_DIR=str(regressions))
    return subprocess.run(
        [
            sys.executable, "-m", "pytest", "properties/test_capacity.py", "--sizing-policy", policy,
            "--hypothesis-profile", "replay", "-p", "no:cacheprovider", "-q",
        ],
        capture_output=True, text=True, timeout=600, env=env,
    )


def test_fuzzing_the_prefix_sizing_writes_a_nemotron_shaped_regression(tmp_path: Path) -> None:
    # The run ends as soon as every property fails; the budget only bounds a slow machine.
    proc, regressions = fuzz(tmp_path, "mrv2-prefix", minutes="1")
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


def test_a_found_failure_is_replayed_by_the_next_plain_run(tmp_path: Path) -> None:
    # This broken policy passes every hand-pinned case (all have dcp_size 1), so a
    # failing replay can only come from the file the fuzzer wrote.
    policy = "tests.broken_policies:dcp_on_replicated"
    assert replay(tmp_path / "empty", policy).returncode == 0
    proc, regressions = fuzz(tmp_path, policy, minutes="0.3")
    assert list(regressions.glob("*.json")), proc.stdout + proc.stderr
    replayed = replay(regressions, policy)
    assert replayed.returncode == 1, replayed.stdout
    assert "Failing explicit example" in replayed.stdout
    assert replay(regressions, "mrv2").returncode == 0  # the fixed sizing holds on the same case


def test_fuzzing_the_fixed_sizing_writes_nothing_and_reports_its_budget(tmp_path: Path) -> None:
    proc, regressions = fuzz(tmp_path, "mrv2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not list(regressions.glob("*.json")) if regressions.exists() else True
    assert "no new regression files" in proc.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rounds"] >= 1
    assert all(p["examples"] > 0 and p["outcome"] == "holds" for p in summary["properties"])
    assert any("S absent" in p["events"] for p in summary["properties"])
