"""Child processes that never outlive their owner: one process group each, killed as a group.

Used by the fleet's redis-server and fuzzing workers and by the distributed
DCP ranks. Each child is started in its own session (``start_new_session``),
so it leads a process group that holds it and anything it spawns; ending it
means signalling the group, waiting, then ``SIGKILL`` for whatever is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path


def signal_group(proc: subprocess.Popen, sig: int) -> None:  # type: ignore[type-arg]
    """Send ``sig`` to the process group ``proc`` leads (nothing if it is gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def end_group(proc: subprocess.Popen, first: int = signal.SIGTERM, grace_s: float = 10.0) -> None:  # type: ignore[type-arg]
    """Ask the group to end with ``first``, then kill whatever is left of it, and reap ``proc``.

    ``grace_s`` only bounds the wait for a polite exit; the ``SIGKILL`` that
    follows always runs, for children of a leader that already exited too.
    """
    if proc.poll() is None:
        signal_group(proc, first)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    signal_group(proc, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie awaiting its parent counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return True


def describe_exit(code: int | None) -> str:
    """``exit status 3``, ``signal SIGKILL`` or ``no exit status`` for a ``returncode``."""
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"
