"""Child processes that never outlive their owner: one process group each, killed as a group.

Used by the fleet's redis-server and fuzzing workers, the distributed DCP
ranks and the engine's release workers. Each child is started in its own
session (``start_new_session``), so it leads a process group that holds it and
anything it spawns; ending it means signalling the group, waiting, then
``SIGKILL`` for whatever is left.

Every owner registers its children here with how to end them
(:func:`register_child`) and forgets them once ended (:func:`forget_child`);
one ``atexit`` handler (:func:`end_children`) ends whatever is still
registered, newest first, so a child started to serve an older one (a worker
talking to the fleet's server) goes before it, and no module keeps an exit
hook of its own. A child registered with a ``kind`` can also be ended with the
others of its kind before exit (:func:`end_children` with ``kind``: the DCP
ranks at the end of a pytest session), so no owner keeps a second list of its
live children.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import traceback
from collections.abc import Callable
from pathlib import Path

_CHILDREN: dict[Callable[[], None], str] = {}
"""How to end each registered child, oldest first, with its kind (a dict: ordered, and forgetting is O(1))."""


def register_child(end: Callable[[], None], kind: str = "") -> None:
    """Have ``end`` (ending a child, idempotent) run at interpreter exit unless forgotten first.

    ``end`` is the key :func:`forget_child` takes: pass the same bound method
    (``self.close``) to both. Registering it again makes it the newest.
    ``kind`` names a family :func:`end_children` can end on its own.
    """
    _CHILDREN.pop(end, None)
    _CHILDREN[end] = kind


def forget_child(end: Callable[[], None]) -> None:
    """The child ``end`` ends is gone (its owner ended it): nothing to do at exit."""
    _CHILDREN.pop(end, None)


def end_children(kind: str | None = None) -> None:
    """End every registered child, or every one of ``kind``, newest first (the interpreter's exit runs this).

    One that fails to end is reported and the rest still end, as separate
    ``atexit`` handlers behaved.
    """
    while ends := [end for end, k in _CHILDREN.items() if kind is None or k == kind]:
        end = ends[-1]
        del _CHILDREN[end]
        try:
            end()
        except Exception:  # report it and go on: the others must still end
            traceback.print_exc()


atexit.register(end_children)


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
