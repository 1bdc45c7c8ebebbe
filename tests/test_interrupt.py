"""Ctrl-C ends a long run early, and the run still prints its summary and keeps what it found."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def uncaught(stderr: str) -> str:
    """stderr without the blocks Python prints for exceptions it ignored (in gc callbacks)."""
    return stderr if "Exception ignored" not in stderr else stderr.split("Exception ignored")[0]


def interrupt_after(args: list[str], seconds: float) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "crossattn_sizing", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(seconds)
    # Like a user pressing Ctrl-C again: a SIGINT that lands inside a gc callback is
    # swallowed by Python ("Exception ignored"), so keep signalling until the run ends.
    for _ in range(30):
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=4)
            break
        except subprocess.TimeoutExpired:
            continue
    else:
        proc.kill()
        out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_interrupted_fuzz_prints_its_summary_and_keeps_regressions(tmp_path: Path) -> None:
    regressions = tmp_path / "regressions"
    result = interrupt_after(
        [
            "fuzz", "--minutes", "10", "--policy", "mrv2-prefix", "--policy", "mrv2",
            "--regressions", str(regressions), "--db", str(tmp_path / "db"), "-k", "test_capacity",
            "--examples-per-round", "100000",
        ],
        seconds=12,
    )
    assert "fuzz summary" in result.stdout and "stopped early" in result.stdout, result.stdout + result.stderr
    assert "Traceback" not in uncaught(result.stderr)
    assert result.returncode == 1  # mrv2-prefix failed before the interrupt
    assert list(regressions.glob("*.json"))
    assert any((tmp_path / "db").rglob("*")), "the example database was not kept"


def test_interrupted_verify_reports_what_ran(tmp_path: Path) -> None:
    result = interrupt_after(
        [
            "verify", "--policy", "mrv2", "--policy", "mrv2-prefix", "-k", "test_capacity",
            "--max-examples", "1000000",
        ],
        seconds=8,
    )
    assert result.returncode == 130, result.stdout + result.stderr
    assert "interrupted" in result.stdout
    assert "mrv2" in result.stdout
    assert "Traceback" not in uncaught(result.stderr)
