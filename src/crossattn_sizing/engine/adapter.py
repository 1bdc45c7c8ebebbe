"""The verdict boundary between an engine's code and the harness's adapter around it.

A verdict of "fails" is an observation the harness judged about the engine's
code: a guard violation, a column that is not the request's own, a width
short of the tokens, an output off the reference. Everything else that goes
wrong while the engine's code runs under the harness is the harness's own gap:
a stand-in reached, or used in a way it does not support (a subscript, an
iteration, arithmetic, a truth test); a function renamed or moved between
releases; a signature changed (a ``TypeError`` on the call the adapter
makes). Those are "not run", never "fails": the release is not blamed for
what the harness could not run.

Each engine's worker catches what its steps raise and turns it into
:func:`not_run` (the piece, the engine's own file and line, and what was
raised), so the message a user reads names where the harness must grow. This
module is shared by every engine family and imports nothing of any.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any


class StandInReached(RuntimeError):
    """The engine's code used a piece the harness stands in for, in a way the stand-in does not serve.

    ``piece`` names it (a dotted import, ``sgl_kernel.X``, a definition the
    harness does not execute); ``how`` what the code did with it (``called``,
    ``subscripted``, ``iterated``, ...).
    """

    def __init__(self, piece: str, how: str = "used") -> None:
        super().__init__(f"no CPU stand-in for {piece} ({how})")
        self.piece = piece
        self.how = how


class AdapterGap(RuntimeError):
    """The harness's adapter cannot run a step of this release (a definition missing, moved or renamed).

    Raised while the adapter loads a release; the worker reports it as "not
    run" with ``piece`` and ``where`` (``file:line`` of the engine's code, or
    the file the piece was looked for in).
    """

    def __init__(self, piece: str, message: str, where: str = "") -> None:
        super().__init__(message)
        self.piece = piece
        self.where = where


def engine_frame(exc: BaseException, root: Path) -> tuple[str, str]:
    """``(path:line, function)`` of the deepest frame of ``exc``'s traceback in the engine's files under
    ``root`` (the path relative to it), or ``("", "")`` when the engine's code was never entered (the
    harness's own call was refused: a signature changed)."""
    base = str(root.resolve())
    where, function = "", ""
    for frame in traceback.extract_tb(exc.__traceback__):
        try:
            resolved = str(Path(frame.filename).resolve())
        except (OSError, RuntimeError):
            continue
        if resolved.startswith(base + "/"):
            where, function = f"{resolved[len(base) + 1 :]}:{frame.lineno}", frame.name
    return where, function


def not_run(exc: BaseException, step: str, root: Path) -> dict[str, Any]:
    """The worker's "not run" verdict for ``exc``, raised while the harness ran ``step`` of the release.

    The piece is the one a :class:`StandInReached` or :class:`AdapterGap`
    names, else the engine's function the exception came out of, else (the
    engine's code never entered: the harness's call itself was refused)
    ``step``. The ``reason`` line says it all: the piece, the engine's file and
    line, what was raised, and that this is the harness's gap, not the
    release's fault.
    """
    where, function = engine_frame(exc, root)
    named = getattr(exc, "piece", None) or function or step
    where = getattr(exc, "where", "") or where
    at = f" at {where}" if where else ""
    reason = (
        f"the harness's adapter cannot run {named}{at} (step: {step}): {type(exc).__name__}: {exc}; "
        "a gap of the harness, not a verdict on the release"
    )
    return {"verdict": "not run", "piece": named, "where": where, "reason": reason}
