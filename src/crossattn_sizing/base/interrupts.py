"""Ctrl-C, handled the same at any moment and by every command (exit status 130).

Python turns SIGINT into ``KeyboardInterrupt`` wherever the main thread is.
Three places lose it: a handler that lands inside a garbage-collector callback
or finalizer (Python prints "Exception ignored" and carries on), pytest, which
catches it and returns "interrupted" like a spent time budget, and an import
in progress (torch half-imported, the next import fails in a confusing way).
So the handler also records the request here; the runners check
:func:`requested` between tests and rounds, and never start new work once it
is set, and :func:`quiet_unraisable` keeps the swallowed exception from
printing a traceback. A third Ctrl-C leaves at once (a hung kernel must not
trap the user).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, NoReturn

from crossattn_sizing.base.outcome import EXIT_INTERRUPTED

EXIT_STATUS = EXIT_INTERRUPTED
"""What every command exits with on Ctrl-C (128 + SIGINT, the shell's convention)."""

SIGNALS = (signal.SIGINT, signal.SIGTERM, *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()))
"""All stop a run the same way: SIGTERM (a supervisor, ``timeout``, ``kill``) and SIGHUP (the
terminal or ssh session closed) are a Ctrl-C that came from elsewhere, so the partial report is
written and the status is 130 every time (Python's default for SIGHUP ends the process at once,
without the report)."""

FORCE_AFTER = 3
"""The Ctrl-C that ends the process without a report."""

_count = 0
_presses = 0
"""Every SIGINT the handler has seen in this process, never reset (see :func:`pressed_since`)."""


_leaving = False
"""Set by :func:`leaving`: the status is decided, a press only counts (see there)."""


def _handler(signum: int, frame: FrameType | None) -> None:
    global _count, _presses
    _count += 1
    _presses += 1
    if _leaving:
        return
    if _count >= FORCE_AFTER:
        os.write(2, b"\ncrossattn-sizing: interrupted again; leaving without a report\n")
        os._exit(EXIT_STATUS)
    raise KeyboardInterrupt


@contextlib.contextmanager
def handling(restore: bool = True) -> Iterator[None]:
    """Route SIGINT (and SIGTERM) through the recording handler for the block, then put the old ones back.

    Counts start at zero. Only the main thread can own signal handlers; elsewhere
    (a command run from a worker thread) Python's default applies. With
    ``restore=False`` (the console script, about to exit) a press after the block
    is ignored instead: the process is leaving with its status anyway. With
    ``restore=True`` the count goes back to zero after the block, so a press that
    ended one in-process run never stops the next one.
    """
    global _count
    _count = 0
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _handler) for sig in SIGNALS}
    try:
        with quiet_unraisable():
            yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if restore else signal.SIG_IGN)
        if restore:  # the run is over: a later run in this process (a test, a library caller) starts clean
            _count = 0


def _quiet(hook: Callable[[Any], object]) -> Callable[[Any], object]:
    def quiet(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and _count > 0:
            return  # a recorded Ctrl-C that landed in a finalizer or gc callback: acted on between tests
        hook(unraisable)

    return quiet


def wrap_unraisable_hook() -> None:
    """Wrap the hook in place as :func:`quiet_unraisable` does, with no putting back (for a caller,
    pytest, that restores its own hook when it ends)."""
    sys.unraisablehook = _quiet(sys.unraisablehook)


@contextlib.contextmanager
def quiet_unraisable() -> Iterator[None]:
    """For the block, a Ctrl-C that Python could not raise (it landed in a garbage-collector callback
    or a finalizer) prints nothing: the handler has recorded it, and the run stops between tests.

    Wraps whatever hook is in place (pytest's, which would print it as a warning with a
    traceback); every other unraisable exception still goes to that hook. The old hook is put
    back only if ours is still the one in place (pytest restores its own at its cleanup).
    """
    previous = sys.unraisablehook
    ours = sys.unraisablehook = _quiet(previous)
    try:
        yield
    finally:
        if sys.unraisablehook is ours:
            sys.unraisablehook = previous


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """:func:`handling` for the block, unless the recording handler is already in place.

    The pytest plugin runs inside a command (``verify``, ``fuzz``: the handler
    is theirs, with its count) or on its own (plain ``pytest``: Python's
    default handler, which records nothing); either way presses are recorded,
    so user code faking a Ctrl-C is told from the user pressing one.
    """
    if signal.getsignal(signal.SIGINT) is _handler:
        yield
        return
    with handling():
        yield


def presses() -> int:
    """How many SIGINTs this process has recorded so far (for :func:`pressed_since`)."""
    return _presses


def pressed_since(before: int) -> bool:
    """Whether a ``KeyboardInterrupt`` seen now may be the user's Ctrl-C (a SIGINT since ``before``).

    Where nothing records SIGINT (the handler is not this module's: a library
    caller, a worker thread), every ``KeyboardInterrupt`` is taken to be the
    user's, never blamed on their code.
    """
    return _presses > before or signal.getsignal(signal.SIGINT) is not _handler


def leaving() -> None:
    """The command has returned its status and the process is about to leave: from here a Ctrl-C
    (or SIGTERM) is blocked where the system allows it, and otherwise only counted.

    A second quick press used to land after the command had printed its report, in the
    handler's own clean-up, and end the process with a traceback and status -2.
    """
    global _leaving
    if hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, set(SIGNALS))
    _leaving = True


def leave(status: int) -> NoReturn:
    """End the process with ``status``: the exit handlers run, the output is flushed, and the process
    leaves at once, without the interpreter's finalization, whatever the status.

    The exit handlers are what must still happen: the registered children are ended and the
    temporary folders removed (:func:`crossattn_sizing.base.processes.end_children`), each with a
    bounded wait. What is skipped is what must not: tearing down every module, torch and
    transformers included, took 5.5 s on a loaded machine (load 15, after the last exit handler),
    all of it while :func:`leaving` keeps SIGTERM blocked, so a SIGTERM sent after the report was
    printed once took 12 s to end the process; joining a thread that never ends (one the user's
    code started in process) could take forever. And once the interpreter has seen a
    KeyboardInterrupt, its own exit may re-raise SIGINT (status -2 instead of 130).
    """
    atexit._run_exitfuncs()  # each handler's exception is printed and the rest still run
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)


def requested() -> bool:
    """Whether the user pressed Ctrl-C during this run (even if the exception was swallowed)."""
    return _count > 0


def announce(line: str) -> None:
    """A progress line for logs (stderr not a terminal), where a live progress bar draws nothing.

    Long runs say what they are doing, and a supervisor (or a test) can wait
    for a run to be under way instead of guessing with a clock.
    """
    if not sys.stderr.isatty():
        print(line, file=sys.stderr, flush=True)
