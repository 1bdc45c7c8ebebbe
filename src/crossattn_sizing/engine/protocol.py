"""The worker's answers as the protocol sends them: a result, or what raised (and any module missing).

Why a module of its own: the loop (:mod:`crossattn_sizing.engine.worker`)
answers each request this way, and so does the release's ``widths_many`` for
each config of a batch (:mod:`crossattn_sizing.engine.vllm.release`); both read it
from here, so neither imports the other. The loop's plumbing every engine's
worker shares is here too: the answer channel (:func:`protocol_stdout`), the
request loop (:func:`serve`), the supervisor a worker running the code under
test sits under (:func:`supervised`) and where in the engine's file its code
stopped (:func:`engine_line`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TextIO

from crossattn_sizing.base.errors import described


def failure(exc: BaseException) -> dict[str, Any]:
    """An error as the protocol sends it: its text (``Kind: message``, which the judge parses), its kind,
    what a user line says of it (``said``: :func:`~crossattn_sizing.base.errors.described`, no class of
    the harness) and, for a missing module, that module.

    ``missing_module`` is the dotted name Python's import system gives the
    error (``ModuleNotFoundError.name``), so the client installs what is
    missing without reading it out of the message.
    """
    out: dict[str, Any] = {"error": f"{type(exc).__name__}: {exc}", "kind": type(exc).__name__,
                           "said": described(exc)}  # fmt: skip
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        out["missing_module"] = exc.name
    return out


def answer(call: Callable[[], Any]) -> dict[str, Any]:
    """``{"ok": true, "result": ...}``, or what ``call`` raised (:func:`failure`): the protocol's answer."""
    try:
        return {"ok": True, "result": call()}
    except Exception as exc:  # one request's failure is its answer; the worker stays up
        return {"ok": False, **failure(exc)}


def protocol_stdout() -> TextIO:
    """The worker's answer channel: the real stdout, with ``sys.stdout`` (and fd 1) sent to stderr.

    The engine's own prints then go to stderr and never corrupt the protocol.
    """
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto


def close_channels(proto: TextIO) -> None:
    """The supervisor's copies of the protocol's pipes (the worker's): the judge must see their end
    when the worker dies."""
    proto.close()
    for fd in (0, 1):
        with contextlib.suppress(OSError):
            os.close(fd)


def supervised(proto: TextIO) -> Callable[[int], NoReturn]:
    """Put this worker under a supervisor and make it a child subreaper; ``leave(code)`` ends it.

    Why: the code under test may start processes in sessions of their own (``setsid``) or
    leave orphans, which no process-group kill reaches. Under the supervisor
    (:func:`~crossattn_sizing.base.processes.supervise`), with this process a subreaper too,
    every descendant stays in reach: ``leave`` flushes the protocol, ends each one by its id
    and exits at once (a thread the code left must not keep the judge waiting), and a
    judge killed outright is watched for (:func:`~crossattn_sizing.base.processes.watch_parent`).
    Call it before the code under test runs; ``leave`` is bound here, before that code can rebind anything.
    """
    from crossattn_sizing.base.processes import under_supervisor

    return under_supervisor(lambda: close_channels(proto), proto.flush)


def encoded(reply: dict[str, Any], op: object, dumps: Callable[[Any], str] = json.dumps) -> str:
    """``reply`` as one protocol line; an answer the encoder refuses (a value that is not JSON: a tensor,
    a numpy integer, a cycle) is instead a failure saying so in one line, for the request ``op``.

    Why: an encoder error left to rise ends the worker, and the parent reads the end of its stderr, a
    trace from inside ``json``, as the reason. ``dumps`` is bound when this module is imported, before
    any user or engine code runs.
    """
    try:
        return dumps(reply) + "\n"
    except (TypeError, ValueError, RecursionError) as exc:  # what json raises for a value it cannot write
        said = f"the answer to {op} holds a value the protocol cannot send ({exc})"
        return (
            dumps({"ok": False, "error": f"Unencodable: {said}", "kind": "Unencodable", "said": said}) + "\n"
        )


def serve(proto: TextIO, dispatch: Callable[[dict[str, Any]], Any]) -> int:
    """Answer one JSON request a line from stdin until it ends, each by :func:`answer`; exit status 0."""
    for line in sys.stdin:
        if line.strip():
            request = json.loads(line)
            reply = answer(lambda request=request: dispatch(request))  # type: ignore[misc]
            proto.write(encoded(reply, request.get("op")))
    return 0


def engine_line(exc: BaseException, path: str) -> int | str:
    """The deepest line of the engine's file ``path`` in ``exc``'s traceback: where its code stopped."""
    tb = exc.__traceback__
    line: int | str = "?"
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def stack_on_request() -> None:
    """Have ``SIGUSR1`` write every thread's stack to stderr (faulthandler), from the signal handler itself.

    Why: when a call into the release's code outlives its deadline, the judge
    asks the worker where it is before ending it
    (:meth:`crossattn_sizing.engine.client.EngineWorker.hung_where`), so the
    verdict names the step that hung. faulthandler writes from the handler, so a
    loop, a sleep or a wait on a lock answers as well.
    """
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
