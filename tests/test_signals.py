"""Signals from outside: SIGTERM is a Ctrl-C (partial report, status 130), a killed fleet leaves no
worker, and Ctrl-C pressed twice while a policy hangs still ends cleanly.

Every test waits for an event (a line on stderr, a worker's log line) before
signalling, never a guessed number of seconds; timeouts only stop a hung child.
Fleet workers run in their own sessions, so each test also kills any worker it
saw, however it ends: nothing is left behind even when an assertion fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crossattn_sizing.base.processes import alive, descendants
from tests.bad_input_cases import NEMOTRON
from tests.processes import NEVER_FINISHES, Running, cli, running
from tests.test_interrupt import uncaught
from tests.unusable_policies import HANGING

pytestmark = pytest.mark.slow

GONE_WITHIN_S = 120.0
"""How long a worker may take to notice its parent died (normally well under a second)."""


def wait_until(condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout:.0f} s")
        time.sleep(0.1)


def fleet_cmd(tmp: Path) -> list[str]:
    # mrv2 holds: the workers fuzz NEVER_FINISHES examples per round, far longer than the test takes.
    return cli("fuzz", "--jobs", "2", "--minutes", "60", "--policy", "mrv2", "-k", "test_capacity",
               "--examples-per-round", NEVER_FINISHES, "--db", str(tmp / "db"),
               "--regressions", str(tmp / "regressions"), "--json", str(tmp / "fleet.json"))  # fmt: skip


@contextlib.contextmanager
def fleet(tmp: Path) -> Iterator[tuple[Running, list[int]]]:
    """A running ``fuzz --jobs 2`` whose workers are both fuzzing; its workers are killed on exit."""
    pids: list[int] = []
    folder: Path | None = None
    try:
        with running(fleet_cmd(tmp)) as child:
            line = child.wait_for(lambda line: line.startswith("fuzz: 2 workers"))
            pids += [int(p) for p in re.findall(r"\d+", line.split("pids", 1)[1].split(")")[0])]
            folder = Path(line.split("logs in", 1)[1].strip())
            for i in range(2):  # each worker is past start-up (and its parent watch) and in a round
                log = folder / f"worker-{i}.log"
                started = lambda log=log: log.is_file() and "fuzz: round 1" in log.read_text(errors="replace")  # noqa: E731
                wait_until(started, 600, f"worker {i} did not start fuzzing")
            yield child, pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        if folder is not None:  # a parent killed outright (SIGKILL) runs no exit hook to remove it
            shutil.rmtree(folder, ignore_errors=True)


def test_killing_the_fleet_parent_outright_leaves_no_worker(tmp_path: Path) -> None:
    """SIGKILL runs no handler and no atexit hook: the workers notice by themselves."""
    with fleet(tmp_path) as (child, pids):
        child.proc.send_signal(signal.SIGKILL)
        child.proc.wait(timeout=60)
        wait_until(lambda: not any(alive(p) for p in pids), GONE_WITHIN_S, f"workers {pids} still running")


def test_sigterm_to_the_fleet_writes_the_partial_summary_and_leaves_no_worker(tmp_path: Path) -> None:
    with fleet(tmp_path) as (child, pids):
        child.proc.send_signal(signal.SIGTERM)
        assert child.proc.stdout is not None
        out = child.proc.stdout.read()
        code = child.proc.wait(timeout=600)
        assert code == 130, out + "".join(child.err)
        assert "fuzz summary" in out and "interrupted" in out
        data = json.loads((tmp_path / "fleet.json").read_text())
        assert data["interrupted"] is True
        assert all(p["outcome"] != "holds" for p in data["properties"])
        assert not any(alive(p) for p in pids)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_to_verify_writes_the_partial_report(tmp_path: Path, signum: int) -> None:
    """SIGHUP (the terminal closed) ends a run like SIGTERM: without the handler Python's default
    kills the process at once (status -1, no --json), which fails here."""
    report = tmp_path / "report.json"
    command = cli("verify", "--policy", "mrv2", "-k", "test_capacity", "--max-examples", NEVER_FINISHES,
                  "--json", str(report))  # fmt: skip
    with running(command) as child:
        child.wait_for(lambda line: line.startswith("verify: policy mrv2:"))
        result = child.interrupt(signum=signum)
    assert result.returncode == 130, result.stdout + result.stderr
    assert "Traceback" not in uncaught(result.stderr)
    data = json.loads(report.read_text())
    assert data["interrupted"] is True and data["exit_status"] == 130 and data["verdict"] == "interrupted"


def test_sigterm_after_verify_printed_its_report_ends_it_leaving_nothing(tmp_path: Path) -> None:
    """A SIGTERM that lands once the report is printed (the exit handlers, the workers' ending) ends
    the run with the report's own status, or 130 where it landed before the command had returned:
    never a traceback, never another status. Nothing is left: not the policy's worker, not the
    grandchild it started in a session of its own, not a temporary folder.

    The wait for the exit has a generous deadline only so that a hang fails the test instead of
    stalling it: how fast the process leaves is not asserted (CI must not depend on machine load).
    The slow path this guards was the interpreter's teardown of torch and transformers after the exit
    handlers (5.5 s at load 15, SIGTERM blocked all the while), now skipped (``interrupts.leave``)."""
    pid_file, temp = tmp_path / "grandchild.pid", tmp_path / "temp"
    temp.mkdir()
    report = tmp_path / "report.json"
    command = cli("verify", "--policy", f"{HOSTILE}:leaves_a_setsid_grandchild", "-k", "test_capacity",
                  "--max-examples", "5", "--json", str(report), "--junit-xml", str(tmp_path / "junit.xml"))
    tree: list[int] = []
    try:
        with running(command, env={"HOSTILE_PID_FILE": str(pid_file), "TMPDIR": str(temp)}) as child:
            assert child.proc.stdout is not None
            out = []
            while "; exit status " not in (line := child.proc.stdout.readline()):  # the report's last line
                assert line, f"verify ended before its report:\n{''.join(out)}{''.join(child.err)}"
                out.append(line)
            tree = [*descendants(child.proc.pid), int(pid_file.read_text())]
            assert tree[:-1], "the policy's worker is running while verify leaves"
            child.proc.send_signal(signal.SIGTERM)
            out.append(line + child.proc.stdout.read())
            code = child.proc.wait(timeout=EXIT_DEADLINE_S)
        said = "".join(out) + "".join(child.err)
        assert code in (json.loads(report.read_text())["exit_status"], 130), said
        assert "Traceback" not in uncaught("".join(child.err)), said
        assert not [pid for pid in tree if alive(pid)], f"left running after verify: {tree}"
        assert not [p.name for p in temp.iterdir() if p.name.startswith("crossattn-")]
    finally:
        for pid in tree:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


EXIT_DEADLINE_S = 120.0
"""How long a process given SIGTERM may take to leave before the test calls it hung: a guard against a
stalled test, far above anything the exit does (bounded waits of a few seconds), never a measurement."""


def test_sigterm_to_fuzz_writes_the_partial_summary(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    command = cli("fuzz", "--minutes", "60", "--policy", "mrv2", "-k", "test_capacity",
                  "--examples-per-round", NEVER_FINISHES, "--db", str(tmp_path / "db"),
                  "--regressions", str(tmp_path / "regressions"), "--json", str(summary))  # fmt: skip
    with running(command) as child:
        child.wait_for(lambda line: line.strip() == "fuzz: round 1: policy mrv2")
        child.proc.send_signal(signal.SIGTERM)
        assert child.proc.stdout is not None
        out = child.proc.stdout.read()
        code = child.proc.wait(timeout=600)
    assert code == 130, out + "".join(child.err)
    data = json.loads(summary.read_text())
    assert data["interrupted"] is True and data["exit_status"] == 130
    assert all(p["outcome"] != "holds" for p in data["properties"])


def test_sigterm_to_prove_writes_the_partial_result(tmp_path: Path) -> None:
    out_json = tmp_path / "prove.json"
    command = cli("prove", "--policy", HUNG_LATER, "--block-size", "16",
                  "--no-progress", "--json", str(out_json))  # fmt: skip
    with running(command) as child:
        child.wait_for(lambda line: HANGING in line)
        child.proc.send_signal(signal.SIGTERM)
        assert child.proc.stdout is not None
        out = child.proc.stdout.read()
        code = child.proc.wait(timeout=600)
    assert code == 130, out + "".join(child.err)
    assert "holds" not in out and "Traceback" not in uncaught("".join(child.err))
    data = json.loads(out_json.read_text())
    assert data["interrupted"] is True and data["exit_status"] == 130 and data["holds"] is False


HOSTILE = "tests.hostile_code"
HUNG_POLICY = "tests.unusable_policies:hangs"
HUNG_LATER = "tests.unusable_policies:hangs_after_probe"
TWICE = [
    ("check", "--config", NEMOTRON, "--encoder-len", "3329", "--policy", HUNG_POLICY),
    ("verify", "--policy", HUNG_POLICY, "-k", "test_capacity"),
    ("prove", "--policy", HUNG_LATER, "--block-size", "16", "--no-progress"),
    ("verify", "--policy", HUNG_LATER, "-k", "test_capacity"),
]


TWICE_IDS = [f"{a[0]}-{a[a.index('--policy') + 1].split(':')[1]}" for a in TWICE]


@pytest.mark.parametrize("argv", TWICE, ids=TWICE_IDS)
def test_two_quick_ctrl_c_while_a_policy_hangs_exit_130_without_a_traceback(argv: tuple[str, ...]) -> None:
    with running(cli(*argv)) as child:
        child.wait_for(lambda line: HANGING in line)
        child.proc.send_signal(signal.SIGINT)
        result = child.interrupt()  # the second press, right after the first
    assert result.returncode == 130, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    said = [line for line in result.stdout.splitlines() if "holds" in line and "expected" not in line]
    assert not said, result.stdout  # the table's "expected: holds" row is no verdict
