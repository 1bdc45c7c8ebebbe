"""Child processes for end-to-end tests, always cleaned up.

Every child starts in its own session (process group), and whatever happens
to the test (a failed assertion, a timeout, Ctrl-C) the whole group is killed
on the way out, so no test leaves a process behind. Waiting is for events (a
line on stderr, a file appearing), never a guess at how long start-up takes;
timeouts exist only to stop a hung child, and are generous.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HUNG = 2400.0
"""Seconds after which a child is taken to be hung: no test expects to come near it. Generous on purpose:
the longest child (``report`` on the SGLang tree with ``--fix``) takes about 10 min on a busy 2-core
machine beside the other pytest-xdist worker, and a guard against a hang must not become a time budget."""

NEVER_FINISHES = str(10**8)
"""Examples per property for a run that a test stops by a signal: it must still be running then.
mrv2's capacity properties run about 1000 examples a second per process here, so 10**5 took
under two minutes, and a CI run whose second fuzz worker was slow to start saw the first one
finish (and hold) before the signal came. 10**8 is about a day."""


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "crossattn_sizing", *args]


def kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill the child's whole process group and reap the child."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=60)


def run(
    command: list[str], env: dict[str, str] | None = None, timeout: float = HUNG, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """Run to completion in ``cwd`` (its own process group, killed if it hangs or the test is stopped)."""
    proc = subprocess.Popen(
        command, cwd=cwd, env={**os.environ, **(env or {})}, text=True, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        kill_group(proc)
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def interpreted_with_and_without_shims(script: str) -> dict[str, dict[str, object]]:
    """Run ``script`` twice in fresh interpreters, as a vLLM worker starts: with ``off``, then ``on``.

    The script reads its mode from ``sys.argv[1]`` (``on``: apply the worker's
    CPU shims) and prints one JSON object as its last line, which is returned
    per mode. A fresh interpreter each time keeps this process's Triton as it was.
    """
    env = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    answers = {}
    for mode in ("off", "on"):
        done = run([sys.executable, "-c", script, mode], env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        answers[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    return answers


def run_to_broken_stdout(
    command: list[str], kind: str, env: dict[str, str] | None = None, timeout: float = HUNG
) -> subprocess.CompletedProcess[str]:
    """Run to completion with stdout ``/dev/full`` (``kind`` "full") or a pipe whose reader closed
    before the child wrote ("closed": its first flush meets EPIPE, as after ``| head -1``)."""
    if kind == "full":
        out = os.open("/dev/full", os.O_WRONLY)
    else:
        read, out = os.pipe()
        os.close(read)
    try:
        proc = subprocess.Popen(
            command, cwd=ROOT, env={**os.environ, **(env or {})}, text=True, start_new_session=True,
            stdout=out, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            _, err = proc.communicate(timeout=timeout)
        finally:
            kill_group(proc)
    finally:
        os.close(out)
    return subprocess.CompletedProcess(command, proc.returncode, "", err)


class Running:
    """A child whose stderr is read line by line as it comes, so a test can wait for an event."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.err: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, condition: Callable[[str], bool], timeout: float = HUNG) -> str:
        """Block until a stderr line satisfies ``condition``; fail if the child ends first."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no such line within {timeout:.0f} s:\n{''.join(self.err)}") from None
            if line is None:
                raise AssertionError(f"the child ended first (exit {self.proc.wait()}):\n{''.join(self.err)}")
            self.err.append(line)
            if condition(line):
                return line

    def interrupt(
        self, timeout: float = HUNG, signum: int = signal.SIGINT
    ) -> subprocess.CompletedProcess[str]:
        """Press Ctrl-C once (SIGINT to the child, as a terminal would; or ``signum``), collect everything."""
        self.proc.send_signal(signum)
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()
        self.proc.wait(timeout=timeout)
        self._reader.join(timeout=60)
        while True:
            line = self.lines.get_nowait() if not self.lines.empty() else None
            if line is None:
                break
            self.err.append(line)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, "".join(self.err))


@contextlib.contextmanager
def running(command: list[str], env: dict[str, str] | None = None) -> Iterator[Running]:
    """Start a child for the block; its process group is killed when the block ends, however it ends."""
    proc = subprocess.Popen(
        command, cwd=ROOT, env={**os.environ, **(env or {})}, text=True, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        yield Running(proc)
    finally:
        kill_group(proc)
