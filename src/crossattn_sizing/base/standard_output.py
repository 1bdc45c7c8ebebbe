"""Standard output that cannot be written (``> /dev/full``, ``| head -1``) is an I/O failure, not a verdict.

Without this, the first ``print`` after the reader of a pipe went away raises
``BrokenPipeError`` wherever the command happens to be (a traceback, status 1,
which means "a policy failed"), and even a command that finished has its
buffered output flushed at interpreter exit, where the failure turns into
"Exception ignored" and status 120.

So every command runs with :func:`guarded`: ``sys.stdout`` is wrapped, the
first write or flush that fails is recorded (never raised), and from then on
the process's standard output goes to ``os.devnull`` (Python's own advice for a
closed pipe), so nothing later, the interpreter's last flush included, fails
again. The command finishes its work and writes its files; the CLI then ends
with :data:`EXIT_STATUS` and one line on stderr saying what was lost.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

EXIT_STATUS = 2
"""The status of a run whose standard output could not be written: the same as any output the
user named that cannot be written (``--json`` to a full disk), never 1 (a verdict)."""


class _Guarded:
    """A text stream that records its first ``OSError`` instead of raising it."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.failure: OSError | None = None

    def _failed(self, exc: OSError) -> None:
        if self.failure is None:
            self.failure = exc
        with contextlib.suppress(Exception):  # a capture stream (tests) has no descriptor to replace
            fd = self._stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)

    def write(self, text: str) -> int:
        if self.failure is None:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._failed(exc)
        return len(text)

    def flush(self) -> None:
        if self.failure is None:
            try:
                self._stream.flush()
            except OSError as exc:
                self._failed(exc)
                with contextlib.suppress(OSError):  # the buffer now drains into os.devnull
                    self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded() -> Iterator[_Guarded]:
    """``sys.stdout`` guarded for the block (see the module docstring); the stream is put back after."""
    previous = sys.stdout
    guard = _Guarded(previous)
    sys.stdout = guard
    try:
        yield guard
    finally:
        guard.flush()  # what is still buffered is part of the answer: its failure counts too
        if sys.stdout is guard:
            sys.stdout = previous


def current_failure() -> OSError | None:
    """The failure recorded on standard output so far (after flushing what is buffered), or None."""
    stream = sys.stdout
    if isinstance(stream, _Guarded):
        stream.flush()
        return stream.failure
    return None


def describe(failure: OSError) -> str:
    """The error line's reason: ``standard output cannot be written (No space left on device)``."""
    return f"standard output cannot be written ({failure.strerror or type(failure).__name__})"
