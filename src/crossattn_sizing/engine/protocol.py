"""The worker's answers as the protocol sends them: a result, or what raised (and any module missing).

Why a module of its own: the loop (:mod:`crossattn_sizing.engine.worker`)
answers each request this way, and so does the release's ``widths_many`` for
each config of a batch (:mod:`crossattn_sizing.engine.vllm.release`); both read it
from here, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def failure(exc: BaseException) -> dict[str, Any]:
    """An error as the protocol sends it: its text, its kind and, for a missing module, that module.

    ``missing_module`` is the dotted name Python's import system gives the
    error (``ModuleNotFoundError.name``), so the client installs what is
    missing without reading it out of the message.
    """
    out: dict[str, Any] = {"error": f"{type(exc).__name__}: {exc}", "kind": type(exc).__name__}
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        out["missing_module"] = exc.name
    return out


def answer(call: Callable[[], Any]) -> dict[str, Any]:
    """``{"ok": true, "result": ...}``, or what ``call`` raised (:func:`failure`): the protocol's answer."""
    try:
        return {"ok": True, "result": call()}
    except Exception as exc:  # one request's failure is its answer; the worker stays up
        return {"ok": False, **failure(exc)}
