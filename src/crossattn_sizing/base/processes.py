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

A process group does not hold a descendant that starts its own session
(``setsid()``), and one whose parent died is handed to init, out of anyone's
reach. So a process that runs the code under test becomes a *child
subreaper* (:func:`become_subreaper`, Linux): every orphan among its
descendants is handed to it instead, and :func:`end_tree` finds each one by
its parent chain in ``/proc`` and ends it by its id. :func:`supervise` puts
such a process between a parent and the code under test (the user-code
workers, the DCP ranks), and :func:`end_supervised` kills it with its tree.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

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


PR_SET_CHILD_SUBREAPER = 36
"""``prctl`` option (linux/prctl.h): orphaned descendants are re-parented to this process, not to init."""


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux); False where that is not possible.

    Not inherited across ``fork``: only the process that calls it holds the
    orphans, so :func:`end_tree` from it (or from its parent, while it lives)
    reaches every descendant, those in a session of their own included.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _parents() -> dict[int, int]:
    """``pid -> parent pid`` of every process this user can see in ``/proc`` (Linux; empty elsewhere)."""
    out: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                text = stat.read()
        except OSError:  # ended while we looked
            continue
        fields = text[text.rfind(b")") + 2 :].split()  # the command name may hold spaces and ")"
        if len(fields) > 1 and fields[0] != b"Z":  # a zombie needs no ending
            out[int(name)] = int(fields[1])
    return out


def descendants(root: int) -> list[int]:
    """Every live process whose parent chain leads to ``root`` (children first), read from ``/proc``."""
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, queue = [], [root]
    while queue:
        for child in children.get(queue.pop(), []):
            if child != root and child not in found:
                found.append(child)
                queue.append(child)
    return found


def _signal_pid(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


MAX_TREE_ROUNDS = 64
"""Rounds of stopping newly found descendants before the kill (a fork bomb outruns no more than this)."""


def end_tree(root: int, *, include_root: bool = False) -> None:
    """Kill every descendant of ``root`` by its id (``root`` too with ``include_root``).

    Each one found is stopped first (``SIGSTOP``: a stopped process forks no
    more), the walk repeated until it finds no new one, then each is killed.
    Orphans reach ``root``'s parent chain only when ``root`` is a subreaper
    (:func:`become_subreaper`) that still lives, so call this before ending ``root``.
    """
    stopped: list[int] = []
    if include_root and root != os.getpid():
        _signal_pid(root, signal.SIGSTOP)
        stopped.append(root)
    for _ in range(MAX_TREE_ROUNDS):
        new = [pid for pid in descendants(root) if pid not in stopped and pid != os.getpid()]
        if not new:
            break
        for pid in new:
            _signal_pid(pid, signal.SIGSTOP)
        stopped += new
    for pid in reversed(stopped):
        _signal_pid(pid, signal.SIGKILL)
        _signal_pid(pid, signal.SIGCONT)  # a stopped process takes its SIGKILL at once; harmless after



def _leave_with_parent(parent: int) -> None:
    """Exit at once when ``parent`` is no longer this process's parent, ending every descendant first."""
    while os.getppid() == parent:
        time.sleep(0.5)
    end_tree(os.getpid())
    os._exit(1)


def watch_parent() -> None:
    """End this process, and everything it started, as soon as its parent is gone (a daemon thread).

    A process in a session of its own is out of its parent's process group, so a parent killed
    outright (``SIGKILL``, no exit handler) no longer ends it: it watches for that itself, even
    while its main thread is stuck in the code under test.
    """
    threading.Thread(target=_leave_with_parent, args=(os.getppid(),), daemon=True).start()


def supervise(close_channels: Callable[[], None]) -> None:
    """Fork: the child returns and runs the code under test; this process stays as its supervisor,
    a child subreaper, until the child ends, and never returns.

    Why: the supervisor runs none of the user's code, so a child that leaves by ``os._exit``
    or dies by a signal still has every process it started, in a session of its own or not,
    handed to the supervisor, which ends each by its id, then leaves with the child's own exit
    status (or dies by its signal), which is what the parent reports. While the child runs,
    the parent's kill (:func:`end_supervised`) walks the tree from here. ``close_channels``
    closes, in the supervisor, the supervisor's copies of whatever the child talks to its parent
    through (pipes, a socket), so the parent sees their end when the child dies. Used by the
    user-code workers (:mod:`crossattn_sizing.engine.worker`) and the DCP ranks
    (:mod:`crossattn_sizing.distributed.rank`); the child should call :func:`become_subreaper`
    too and :func:`end_tree` on itself before it leaves.
    """
    parent = os.getppid()
    become_subreaper()
    child = os.fork()
    if child == 0:
        return
    close_channels()
    threading.Thread(target=_leave_with_parent, args=(parent,), daemon=True).start()
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    end_tree(os.getpid())
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # died by a signal: so does its supervisor, so the parent names that signal
        with contextlib.suppress(OSError, ValueError):
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(128 - code)
    os._exit(code)


def end_supervised(proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    """Kill a process started under :func:`supervise` with everything it started, by id and by group.

    Its supervisor is a child subreaper, so while it lives every descendant, one in a session
    of its own too, is found from it; the group kill after catches what a supervisor that
    already left could not reach.
    """
    if proc.poll() is None:  # not reaped: the id is still this process's
        end_tree(proc.pid, include_root=True)
    end_group(proc, signal.SIGKILL, 0.0)


_TEMP_FOLDERS: dict[Path, Callable[[], None]] = {}
"""Each temporary folder still standing, with the registered call that removes it."""


def temp_folder(prefix: str) -> Path:
    """A fresh folder in the system temp folder, removed at exit (success, failure or Ctrl-C) unless
    :func:`remove_temp_folder` removed it first.

    Registered as a child is: one made before a worker that writes into it is
    removed after that worker has ended (newest first).
    """
    path = Path(tempfile.mkdtemp(prefix=prefix))
    remove = functools.partial(_remove_folder, path)
    _TEMP_FOLDERS[path] = remove
    register_child(remove, "temp")
    return path


def _remove_folder(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    _TEMP_FOLDERS.pop(path, None)


def remove_temp_folder(path: Path) -> None:
    """Remove a folder :func:`temp_folder` made, now (idempotent).

    Removed before it is forgotten: a Ctrl-C that cuts the removal short
    leaves it registered, so the exit handlers remove the rest.
    """
    remove = _TEMP_FOLDERS.get(path)
    if remove is not None:
        remove()
        forget_child(remove)
    else:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def temp_folder_while(prefix: str) -> Iterator[Path]:
    """:func:`temp_folder` for the length of a ``with`` block, removed when the block ends.

    Unlike ``tempfile.TemporaryDirectory``, a folder whose removal a Ctrl-C
    cut short (or that a worker still wrote into) is removed at exit all the same.
    """
    path = temp_folder(prefix)
    try:
        yield path
    finally:
        remove_temp_folder(path)


def under_supervisor(close_channels: Callable[[], None], flush: Callable[[], None], *,
                     watch: bool = True) -> Callable[[int], NoReturn]:  # fmt: skip
    """Put this process under a supervisor (:func:`supervise`) as a child subreaper; ``leave(code)`` ends it.

    The one way a process running code under test starts and ends (the user-code and engine workers,
    the DCP ranks). ``leave`` flushes what the process reports through (``flush``, errors ignored: a
    closed pipe must not stop the leaving), ends every descendant by its id and exits at once: a
    thread the code left must not keep its parent waiting, and tearing down torch takes seconds on a
    loaded machine. It is bound here, before the code under test can rebind anything. ``watch``: end
    this process as soon as its parent is gone (:func:`watch_parent`).
    """
    supervise(close_channels)
    become_subreaper()
    if watch:
        watch_parent()
    me, exit_now = os.getpid(), os._exit

    def leave(code: int) -> NoReturn:
        with contextlib.suppress(OSError, ValueError):
            flush()
        end_tree(me)
        exit_now(code)

    return leave
