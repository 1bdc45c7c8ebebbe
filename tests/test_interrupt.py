"""Ctrl-C: exit status 130 from every command, at any moment, with what ran reported and kept.

The end-to-end tests wait for an event (a progress line on stderr) before
pressing Ctrl-C, never for a guessed number of seconds, and kill the child's
process group however they end. The in-process tests deliver a real SIGINT
from inside each command's work, so the moment is exact.
"""

from __future__ import annotations

import json
import os
import signal
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from crossattn_sizing.base import interrupts
from crossattn_sizing.commands.cli import main
from tests.bad_input_cases import NEMOTRON
from tests.processes import NEVER_FINISHES, cli, running

pytestmark = pytest.mark.slow


def uncaught(stderr: str) -> str:
    """stderr without the blocks Python prints for exceptions it ignored (in gc callbacks)."""
    return stderr if "Exception ignored" not in stderr else stderr.split("Exception ignored")[0]


def test_interrupted_fuzz_prints_its_summary_and_keeps_regressions(tmp_path: Path) -> None:
    regressions, summary = tmp_path / "regressions", tmp_path / "summary.json"
    # An entry from an earlier night: the database must survive the Ctrl-C. (Whether this round adds
    # one of its own depends on its random draws: mrv2-prefix can fail on a pinned example first,
    # which Hypothesis does not save; seen once in a full-suite run. The regression files below are
    # what the round found.)
    from hypothesis.database import DirectoryBasedExampleDatabase

    DirectoryBasedExampleDatabase(str(tmp_path / "db")).save(b"earlier night", b"an example")
    command = cli(
        "fuzz", "--minutes", "600", "--policy", "mrv2-prefix", "--policy", "mrv2",
        "--regressions", str(regressions), "--db", str(tmp_path / "db"), "-k", "test_capacity",
        "--examples-per-round", NEVER_FINISHES, "--json", str(summary),
    )  # fmt: skip
    with running(command) as child:
        # mrv2-prefix fails fast (its round ends when every property has failed); then mrv2 runs
        # NEVER_FINISHES examples per property, far longer than it takes to press Ctrl-C.
        child.wait_for(lambda line: line.strip() == "fuzz: round 1: policy mrv2")
        result = child.interrupt()
    shown = result.stdout + result.stderr
    assert result.returncode == 130, shown
    assert "fuzz summary" in result.stdout and "interrupted" in result.stdout, shown
    assert "Traceback" not in uncaught(result.stderr)
    assert list(regressions.glob("*.json")), "the regression files were not kept"
    kept = DirectoryBasedExampleDatabase(str(tmp_path / "db")).fetch(b"earlier night")
    assert list(kept) == [b"an example"], "the example database was not kept"
    data = json.loads(summary.read_text())
    assert data["interrupted"] is True and data["exit_status"] == 130
    outcomes = {(p["policy"], p["outcome"]) for p in data["properties"]}
    assert ("mrv2-prefix", "fails") in outcomes
    assert ("mrv2", "holds") not in outcomes  # nothing of mrv2 finished: never a "holds"


def test_interrupted_verify_reports_what_ran_and_nothing_as_holding(tmp_path: Path) -> None:
    report, junit = tmp_path / "report.json", tmp_path / "report.xml"
    command = cli(
        "verify", "--policy", "mrv2", "--policy", "mrv2-prefix", "-k", "test_capacity",
        "--max-examples", NEVER_FINISHES, "--json", str(report), "--junit-xml", str(junit),
    )  # fmt: skip
    with running(command) as child:
        # Both policies share one run of the suite (crossattn_sizing.runs.shared_run).
        child.wait_for(lambda line: line.startswith("verify: policy mrv2, mrv2-prefix:"))
        result = child.interrupt()
    shown = result.stdout + result.stderr
    assert result.returncode == 130, shown
    assert "interrupted" in result.stdout and "exit status 130" in result.stdout, shown
    assert "Traceback" not in uncaught(result.stderr)
    data = json.loads(report.read_text())
    assert data["exit_status"] == 130 and data["verdict"] == "interrupted" and data["interrupted"] is True
    verdicts = {p["policy"]: p["verdict"] for p in data["policies"]}
    # Both were in the shared run when Ctrl-C came: neither finished, neither holds.
    assert verdicts == {"mrv2": "interrupted", "mrv2-prefix": "interrupted"}
    assert all(prop["outcome"] != "holds" for p in data["policies"] for prop in p["properties"])
    cases = ET.parse(junit).getroot().iter("testcase")
    assert all(case.find("error") is not None or case.find("failure") is not None for case in cases)


def test_repeated_ctrl_c_still_exits_130(tmp_path: Path) -> None:
    """A user who presses Ctrl-C again and again gets out, with the same status and no traceback."""
    command = cli("verify", "--policy", "mrv2", "-k", "test_capacity", "--max-examples", NEVER_FINISHES)
    with running(command) as child:
        child.wait_for(lambda line: line.startswith("verify: policy mrv2:"))
        for _ in range(2):
            child.proc.send_signal(signal.SIGINT)
        result = child.interrupt()
    assert result.returncode == 130, result.stdout + result.stderr
    assert "Traceback" not in uncaught(result.stderr)


def ctrl_c(*args: object, **kwargs: object) -> None:
    """Stands in for a command's work: the user presses Ctrl-C right then (a real SIGINT)."""
    os.kill(os.getpid(), signal.SIGINT)
    raise AssertionError("SIGINT did not interrupt")  # pragma: no cover


COMMANDS = "crossattn_sizing.commands"
MOMENTS = [
    # (argv, the function the Ctrl-C lands in)
    (["check", "--config", NEMOTRON, "--encoder-len", "3329"], f"{COMMANDS}.check.violations"),
    (["reproduce", "whisper"], f"{COMMANDS}.reproduce.judge"),
    (["prove", "--policy", "mrv2", "--block-size", "1-4", "--no-progress"], f"{COMMANDS}.prove.prove_all"),
    (["verify", "--policy", "mrv2", "-k", "test_capacity"], "crossattn_sizing.runs.verify_run.check_impl"),
    (["verify", "--policy", "mrv2", "-k", "test_capacity"], "crossattn_sizing.runs.verify_run.run_suite"),
    (["fuzz", "--policy", "mrv2", "--max-rounds", "1"], f"{COMMANDS}.fuzz.run_suite"),
    (["audit", "--engine", "vllm==0.24.0", "--offline"], f"{COMMANDS}.audit._sources"),
]


@pytest.mark.parametrize(("argv", "where"), MOMENTS, ids=[f"{a[0]}@{w.split('.')[-1]}" for a, w in MOMENTS])
def test_every_command_exits_130_on_ctrl_c_at_any_moment(
    argv: list[str], where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setattr(where, ctrl_c)
    extra = ["--json", str(tmp_path / "out.json")] if argv[0] in ("verify", "fuzz", "prove", "audit") else []
    if argv[0] == "fuzz":
        extra += ["--regressions", str(tmp_path / "regressions"), "--db", str(tmp_path / "db")]
    before = signal.getsignal(signal.SIGINT)
    assert main([*argv, *extra]) == 130
    out, err = capsys.readouterr()
    assert "interrupted" in out + err and "Traceback" not in err
    if argv[0] in ("verify", "fuzz"):  # what ran (nothing) is still written, and says so
        data = json.loads((tmp_path / "out.json").read_text())
        assert data["exit_status"] == 130 and data["interrupted"] is True
    assert signal.getsignal(signal.SIGINT) is before  # the CLI put the old handler back
    assert not interrupts.requested()  # and the press does not stop the next run in this process


class _RaisesInFinalizer:
    """An object whose finalizer raises: Python cannot propagate it, and hands it to sys.unraisablehook."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __del__(self) -> None:
        raise self.exc


def test_a_recorded_ctrl_c_in_a_finalizer_prints_no_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second Ctrl-C can land in a gc callback (seen: Hypothesis's gc timer); the handler has recorded
    it, so the unraisable hook drops it. Any other unraisable error, or a KeyboardInterrupt no press
    explains, still reaches the hook that was in place."""
    seen: list[type[BaseException]] = []
    monkeypatch.setattr("sys.unraisablehook", lambda u: seen.append(type(u.exc_value)))
    with interrupts.quiet_unraisable():
        _RaisesInFinalizer(KeyboardInterrupt())  # no press recorded yet: reported
        monkeypatch.setattr(interrupts, "_count", 1)
        _RaisesInFinalizer(KeyboardInterrupt())  # recorded press: dropped
        _RaisesInFinalizer(ValueError("a real bug in a finalizer"))
    assert seen == [KeyboardInterrupt, ValueError]
