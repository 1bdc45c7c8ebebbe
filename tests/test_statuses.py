"""Each status means one thing: 1 is a verdict, never an I/O failure or a refused option.

Standard output that cannot be written (``> /dev/full``, a pipe whose reader
has gone, as after ``| head -1``) ends every command with status 2 and one line
on stderr, never a traceback, and ``verify --json`` records the status the
process really ended with. Conflicting options are refused, not resolved.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from crossattn_sizing.base import standard_output
from crossattn_sizing.commands.cli import main
from tests.bad_input_cases import NEMOTRON, SMALL_DOMAIN
from tests.processes import cli, run_to_broken_stdout


def run_to(kind: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the console script with a broken stdout; stderr is read whole."""
    return run_to_broken_stdout(cli(*args), kind, {"HF_HUB_OFFLINE": "1"})


COMMANDS = {
    "check": ("check", "--config", NEMOTRON, "--encoder-len", "3329"),
    "check-fails": ("check", "--config", NEMOTRON, "--encoder-len", "3329", "--policy", "mrv2-prefix"),
    "prove": ("prove", "--policy", "mrv2", *SMALL_DOMAIN),
    "reproduce": ("reproduce", "whisper"),
}


@pytest.mark.parametrize("kind", ["full", "closed"])
@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_stdout_that_cannot_be_written_is_status_2_never_a_verdict(name: str, kind: str) -> None:
    result = run_to(kind, *COMMANDS[name])
    assert result.returncode == standard_output.EXIT_STATUS, result.stderr
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1 and "standard output cannot be written" in lines[0], result.stderr
    reason = "No space left on device" if kind == "full" else "Broken pipe"
    assert reason in lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["full", "closed"])
def test_verify_json_says_the_status_the_process_ended_with(kind: str, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    result = run_to(kind, "verify", "--policy", "mrv2", "-k", "test_capacity", "--max-examples", "5",
                    "--json", str(report))  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    data = json.loads(report.read_text())
    assert data["exit_status"] == result.returncode
    assert data["verdict"] == "holds"  # the verdicts themselves are kept
    assert "standard output cannot be written" in data["output_error"]


class Failing:
    """A stream whose every write fails with ``error``, as one on /dev/full or a closed pipe does."""

    def __init__(self, error: OSError) -> None:
        self.error = error

    def write(self, text: str) -> int:
        raise self.error

    def flush(self) -> None:
        pass


def test_a_guarded_stdout_records_its_failure_instead_of_raising(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard itself: the first failure is recorded, later writes are silent, the stream is put back."""
    full = Failing(OSError(28, "No space left on device"))
    monkeypatch.setattr(sys, "stdout", full)
    with standard_output.guarded() as guard:
        print("a verdict table")
        print("more")  # no second failure, no exception
    assert guard.failure is full.error
    assert sys.stdout is full


def test_main_turns_a_lost_stdout_into_status_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In-process: the command's own status (0 here) becomes 2, with the line naming it."""
    monkeypatch.setattr(sys, "stdout", Failing(BrokenPipeError(32, "Broken pipe")))
    code = main(["check", "--config", NEMOTRON, "--encoder-len", "1"])
    monkeypatch.undo()
    assert code == 2
    said = capsys.readouterr().err
    assert "standard output cannot be written (Broken pipe)" in said
    assert "(the status would have been 0)" in said


@pytest.mark.parametrize("option", [("--policy", "mrv2-prefix"), ("--impl", "triton")])
def test_reproduce_refuses_engine_with_policy_or_impl(
    option: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--engine`` sets both; a --policy (or --impl) typed beside it was dropped silently before."""
    code = main(["reproduce", "whisper", "--engine", "vllm==0.25.0", *option])
    err = capsys.readouterr().err
    assert code == 2, err
    assert (
        f"{' '.join(option)}: does not apply with --engine vllm==0.25.0: --engine vllm sets --policy and "
        "--impl to the release's own code" in err
    )
