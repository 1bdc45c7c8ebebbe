"""The console script end to end: verdicts, exit statuses and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from crossattn_sizing.commands.cli import main

NEMOTRON = json.dumps(
    {"max_model_len": 2048, "max_num_batched_tokens": 4096, "groups": [{"kind": "cross", "block_size": 16}]}
)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Through the installed console script, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "crossattn_sizing", *args], capture_output=True, text=True, timeout=600
    )


def test_check_reproduces_the_nemotron_failure(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--policy", "mrv2-prefix", "--config", NEMOTRON, "--encoder-len", "3329"]) == 1
    out = capsys.readouterr().out
    assert "needing 209 columns but the row has 128" in out
    assert "token 2048 is the first without a column" in out


def test_check_passes_under_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--policy", "mrv2", "--config", NEMOTRON, "--encoder-len", "3329"]) == 0
    assert "OK" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "nope"], "unknown sizing policy 'nope'"),
        (["--policy", "no_such_mod:f"], "does not import"),
        (["--config", '{"max_model_len": 10, "max_num_batched_tokens": 5, "groups": '
                      '[{"kind": "cross", "block_size": 16}]}'], "max_num_batched_tokens=5"),
        (["--config", "{not json"], "is not valid JSON"),
        (["--config", "/no/such/file.json"], "must be JSON text or the path"),
        (["--encoder-len", "5000"], "--encoder-len=5000: is not admitted"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    base = {"--policy": "mrv2", "--config": NEMOTRON, "--encoder-len": "3329"}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    proc = run_cli("check", *[x for kv in base.items() for x in kv])
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_verify_holds_for_the_fix_and_catches_the_prefix(tmp_path: Path) -> None:
    report, junit = tmp_path / "report.json", tmp_path / "report.xml"
    proc = run_cli(
        "verify", "--policy", "mrv2", "--policy", "mrv2-prefix", "-k", "test_capacity",
        "--json", str(report), "--junit-xml", str(junit),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "token 2048 is the first without a column" in proc.stdout
    assert "crossattn-sizing check --policy mrv2-prefix" in proc.stdout
    data = json.loads(report.read_text())
    verdicts = {p["policy"]: p["verdict"] for p in data["policies"]}
    assert verdicts == {"mrv2": "holds", "mrv2-prefix": "fails"}
    assert data["exit_status"] == 0
    # In JUnit terms the run is green: the prefix policy failing is the harness working.
    suites = ET.parse(junit).getroot()
    assert sum(int(s.get("failures", "0")) for s in suites) == 0


def test_verify_exits_1_when_a_policy_expected_to_hold_fails() -> None:
    proc = run_cli("verify", "--policy", "tests.broken_policies:floor_div", "-k", "test_capacity")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "UNEXPECTED" in proc.stdout


def test_verify_refuses_a_policy_that_does_not_load() -> None:
    proc = run_cli("verify", "--policy", "mrv2", "--policy", "nowhere:x")
    assert proc.returncode == 2
    assert "nowhere" in proc.stderr and "Traceback" not in proc.stderr


def test_cuda_without_a_gpu_is_one_clear_error() -> None:
    pytest.importorskip("torch")  # the device check itself needs torch to ask about CUDA
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the error path is for machines without it")
    command = [sys.executable, "-m", "pytest", "properties/test_capacity.py", "--device", "cuda"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert "no CUDA device is available" in proc.stderr + proc.stdout
