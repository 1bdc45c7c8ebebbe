"""``crossattn-sizing fuzz --jobs N``: N fuzzing processes against one example database.

Each worker is the ordinary single-process ``fuzz`` command, started with the
same options (rebuilt from the parsed ones, so options added to ``fuzz`` later
are forwarded too), its own JSON summary and log file, in its own process
group. They share the example database: the local directory (``--db``) and,
with ``CROSSATTN_REDIS_URL`` / ``--redis-url``, the fleet's Redis server, so a
failure one worker finds is replayed by the others in their next round (and
by anyone pointing at the same server). The parent waits, forwards Ctrl-C,
and prints one summary of all workers; a worker that died is named, with its
exit status and log, and the run counts as incomplete (exit status 3) unless a
failure was found (1). No worker outlives the parent: they are killed with
their process groups on the way out, and at exit (:mod:`crossattn_sizing.base.processes`); a parent that
is killed outright (SIGKILL runs no hook) is noticed by the workers themselves
(:func:`die_with_parent`). SIGTERM to the parent is a Ctrl-C: forwarded, and
the merged summary is written.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.status import Status

from crossattn_sizing.base import settings as env
from crossattn_sizing.base.processes import end_group, forget_child, register_child, signal_group, temp_folder
from crossattn_sizing.base.threads import child_environment, usable_cores

"""The fleet parent's pid, given to each worker so it can tell when the parent is gone."""

WORKERS_PER_CORE = 2
"""``--jobs`` is at most this many per CPU core this process may run on: each worker is a
whole fuzzing process (Python, torch, Hypothesis), and more than that only shares the cores."""

PARENT_POLL_S = 0.5
"""How often a worker checks that its parent is alive, where the kernel cannot tell it (not Linux)."""

_PR_SET_PDEATHSIG = 1


def max_workers() -> int:
    """The largest ``--jobs`` this machine takes (:data:`WORKERS_PER_CORE` per usable core)."""
    return WORKERS_PER_CORE * usable_cores()


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def die_with_parent() -> None:
    """In a worker: end when the fleet parent is gone, however it went (SIGKILL included).

    On Linux the kernel sends SIGKILL when the parent dies (``PR_SET_PDEATHSIG``);
    everywhere a daemon thread also watches the parent pid. A parent that died
    before this ran is caught by the first check. Nothing without
    :data:`~crossattn_sizing.base.settings.FLEET_PARENT` (a plain ``fuzz``) is touched.
    """
    parent = env.fleet_parent()
    if parent is None:
        return
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # gone already (we were re-parented before the line above)
        _kill_self()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        _kill_self()

    threading.Thread(target=watch, name="fleet-parent-watch", daemon=True).start()


@dataclass
class FuzzWorker:
    """One fuzz worker of the fleet: its process, where its summary and log go."""
    index: int
    proc: subprocess.Popen[bytes]
    summary: Path
    log: Path
    log_file: IO[bytes]

    @property
    def pid(self) -> int:
        """The worker's process id, for the log lines."""
        return self.proc.pid

    def log_tail(self, lines: int = 5) -> str:
        """The last lines of the worker's log (why a worker died): the log itself goes with the fleet's
        temporary folder when the run ends."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(line.strip() for line in text.splitlines()[-lines:] if line.strip())

    def end(self) -> None:
        """Kill whatever is left of the worker's process group and close its log; idempotent."""
        end_group(self.proc, first=signal.SIGKILL, grace_s=0)
        self.log_file.close()
        forget_child(self.end)


def forward_argv(parser: argparse.ArgumentParser, args: argparse.Namespace, drop: set[str]) -> list[str]:
    """The command line that reproduces ``args`` for ``parser``, without the options in ``drop``.

    Only values that differ from the defaults are written, so a worker parses
    exactly what the parent parsed.
    """
    out: list[str] = []
    for action in parser._actions:
        if not action.option_strings or action.dest in drop or action.dest == "help":
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        flag = action.option_strings[-1]
        if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
            out.append(flag)
        elif isinstance(action, argparse.BooleanOptionalAction):
            out.append(action.option_strings[0 if value else 1])
        elif isinstance(action, argparse._AppendAction):
            for item in value:
                out += [flag, str(item)]
        else:
            out += [flag, str(value)]
    return out


def start_workers(argv: list[str], count: int, folder: Path) -> list[FuzzWorker]:
    """Start ``count`` fuzz processes with ``argv`` (each with its own ``--json`` and log in ``folder``),
    each with its share of the cores for torch's threads (:mod:`crossattn_sizing.base.threads`)."""
    workers = []
    for i in range(count):
        summary, log = folder / f"worker-{i}.json", folder / f"worker-{i}.log"
        log_file = log.open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "crossattn_sizing", "fuzz", *argv, "--json", str(summary)],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
            env={**child_environment(count), env.FUZZ_WORKER: str(i), env.FLEET_PARENT: str(os.getpid())},
            start_new_session=True,
        )
        worker = FuzzWorker(i, proc, summary, log, log_file)
        workers.append(worker)
        register_child(worker.end)
    return workers


def signal_all(workers: list[FuzzWorker], sig: int) -> None:
    """Send ``sig`` to every worker still running (its whole process group)."""
    for w in workers:
        if w.proc.poll() is None:
            signal_group(w.proc, sig)


def reap(workers: list[FuzzWorker]) -> None:
    """Kill whatever is left of each worker's process group and close its log."""
    for w in workers:
        w.end()


def wait_all(workers: list[FuzzWorker], on_tick: Callable[[], None] | None = None) -> bool:
    """Wait for every worker; Ctrl-C is forwarded to them as SIGINT. True if interrupted."""
    interrupted = False
    while any(w.proc.poll() is None for w in workers):
        try:
            time.sleep(0.2)
            if on_tick is not None:
                on_tick()
        except KeyboardInterrupt:
            if interrupted:  # a second Ctrl-C: stop now
                signal_all(workers, signal.SIGKILL)
            else:
                interrupted = True
                signal_all(workers, signal.SIGINT)  # each worker still writes its summary
    return interrupted


@dataclass
class FleetRun:
    """What a ``--jobs N`` run left: each worker, whether Ctrl-C stopped it, and their summaries.

    The summaries are merged and printed by ``fuzz`` (:mod:`crossattn_sizing.commands.fuzz`),
    which owns their format; this module only runs the processes.
    """

    workers: list[FuzzWorker]
    interrupted: bool
    summaries: list[dict]  # each finished worker's ``fuzz --json``, in order
    dead: list[FuzzWorker]  # workers that ended without writing a summary


def run_workers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> FleetRun:
    """The ``--jobs N`` run: start the workers, wait for them (forwarding Ctrl-C), read their summaries."""
    from crossattn_sizing.runs.verify_report import PLAIN

    argv = forward_argv(parser, args, drop={"jobs", "json"})
    folder = temp_folder("crossattn-fleet-")  # removed at exit: a dead worker's log tail is printed
    workers = start_workers(argv, args.jobs, folder)
    err = Console(stderr=True)
    err.print(f"fuzz: {len(workers)} workers (pids {', '.join(str(w.pid) for w in workers)}), "
              f"logs in {folder}", **PLAIN)
    started = time.monotonic()

    def show(status: Status) -> Callable[[], None]:
        def tick() -> None:
            running = sum(w.proc.poll() is None for w in workers)
            elapsed = time.monotonic() - started
            status.update(f"fuzz: {running} of {len(workers)} workers running, {elapsed:.0f}s")
        return tick

    try:
        with err.status("fuzz: starting workers") as status:
            interrupted = wait_all(workers, show(status))
    except BaseException:
        reap(workers)
        raise
    reap(workers)
    dead = [w for w in workers if not w.summary.is_file()]
    summaries = [json.loads(w.summary.read_text()) for w in workers if w not in dead]
    return FleetRun(workers, interrupted, summaries, dead)
