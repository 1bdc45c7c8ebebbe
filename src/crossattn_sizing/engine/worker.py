"""The worker process that imports one vLLM release and runs its code for the harness.

Started by :mod:`crossattn_sizing.engine.client` as ``python -m
crossattn_sizing.engine.worker [--path DIR]... [--device cpu|cuda]``. Different
releases cannot share an interpreter, and a real kernel that reads past its
allocation through a raw pointer can kill the process, so each release runs
in its own worker and the harness survives it.

Protocol (JSON lines): the worker writes ``{"ready": ..., "shims": [...]}``
once the engine is imported, then answers each request line ``{"op": ...}``
with ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``. It
exits at end of input, so a parent that dies takes its workers with it. The
protocol uses a private copy of stdout: anything the engine prints goes to
stderr. ``widths_many`` answers a list of configs in one round trip, one such
``ok``/``error`` answer per config, so a long ``prove`` pays the pipe once per
batch, not once per config.

This module is the loop: read a request, dispatch it to the release's
:class:`~crossattn_sizing.engine.vllm.release.Engine`, write the answer
(:mod:`crossattn_sizing.engine.protocol`). What differs between releases is
in :mod:`crossattn_sizing.engine.vllm.quirks`; on a CPU machine (``--device cpu``)
the compatibility layer is what :data:`~crossattn_sizing.engine.vllm.shims.CPU_SHIMS`
lists (:mod:`crossattn_sizing.engine.vllm.shims`), each item reported in the ready
line; nothing else of the engine is replaced.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from crossattn_sizing.engine.protocol import answer, encoded, failure, supervised
from crossattn_sizing.engine.vllm.release import Engine
from crossattn_sizing.engine.vllm.shims import set_cpu_environment


def added_modules(paths: list[str]) -> list[str]:
    """Top-level modules the import chain took from the adapter's dependency directories."""
    roots = [str(Path(p).resolve()) for p in paths]
    found = set()
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if file and any(str(Path(file).resolve()).startswith(r + os.sep) for r in roots):
            found.add(name.split(".")[0])
    return sorted(found)


def _dispatch(engine: Any, req: dict[str, Any]) -> Any:
    """The ``op`` named by the request, called with it: ``Engine.op_<name>`` (or a user subject's)."""
    return getattr(engine, f"op_{req['op']}")(req)


def _load(kind: str, spec: str, device: str) -> Any:
    """What ``--load KIND=SPEC`` names: a user's policy or implementation, as its op table and ready line."""
    from crossattn_sizing.engine.subject import load_subject

    return load_subject(kind, spec, device)


def bind_loop(proto: Any, deadline: float | None) -> Any:
    """``loop(ops)``: answer each request line with ``ops[op](request)`` until the end of input, with every
    function it calls bound now, before the user's module is imported.

    Why: the user's code runs in this process and may rebind ``json``, this
    module's functions or the protocol's at import; the loop that writes
    its answers uses none of them by name. With a ``deadline`` each request
    runs in a child forked for it (:func:`forked`).
    """
    from crossattn_sizing.engine.subject import bind_failure

    loads, encode, write, lines = json.loads, encoded, proto.write, sys.stdin
    fork, fail = forked, bind_failure()

    def reply(ops: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
        op = ops.get(str(request.get("op")))
        if op is None:
            return {"ok": False, "error": f"Unknown: no op {request.get('op')!r}", "kind": "Unknown"}
        try:
            return {"ok": True, "result": op(request)}
        except Exception as exc:  # one request's failure is its answer; the worker stays up
            return fail(exc)

    def loop(ops: dict[str, Any]) -> None:
        for line in lines:
            if not line.strip():
                continue
            request = loads(line)
            if deadline is None:
                answer = reply(ops, request)
            else:
                answer = fork(
                    lambda request=request: reply(ops, request), deadline, request.get("op"), encode
                )
            write(encode(answer, request.get("op")))

    return loop


def main(argv: list[str] | None = None) -> int:
    """The worker loop: a release's code (or a user's ``--load``) answering one JSON request a line."""
    parser = argparse.ArgumentParser(prog="crossattn_sizing.engine.worker")
    parser.add_argument("--path", action="append", default=[], help="directory put first on sys.path")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--load", help="KIND=SPEC: a user's policy or implementation instead of a release")
    parser.add_argument("--fork", type=float, help="with --load: run each request in a forked child, "
                        "killed past this many seconds")  # fmt: skip
    args = parser.parse_args(argv)
    # The protocol gets its own copy of stdout; what the engine prints goes to stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if args.load:
        sys.path[:0] = args.path
        return serve_subject(args.load, args.device, proto, args.fork)
    from crossattn_sizing.engine.protocol import stack_on_request

    # The release's code runs under a supervisor, as a user's does: whatever it starts, in a session of
    # its own too, is ended with it; and asked at a deadline, it says where it is.
    stack_on_request()
    leave = supervised(proto)
    applied = set_cpu_environment() if args.device == "cpu" else []
    sys.path[:0] = args.path
    start = time.perf_counter()
    try:
        engine = Engine(args.device, applied)
    except BaseException as exc:  # reported to the parent as one line, then exit
        proto.write(json.dumps({"ready": False, **failure(exc)}) + "\n")
        leave(1)
    ready = {
        "ready": True,
        "added_modules": added_modules(args.path[1:]),
        "version": engine.version,
        "path": engine.path,
        "shims": engine.shims,
        "import_s": round(time.perf_counter() - start, 2),
    }
    proto.write(json.dumps(ready) + "\n")
    serve(engine, proto)
    # Leave at once, as a user's worker does: the judge waits for this worker at its own exit, and
    # tearing down the release's modules (torch, vLLM) takes seconds on a loaded machine.
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    leave(0)


def serve(engine: Any, proto: Any, deadline: float | None = None) -> None:
    """Answer each request line until the end of input (the parent closed the pipe, or died).

    With a ``deadline`` each request runs in a child forked for it
    (:func:`forked`), so one that crashes or hangs costs that child only.
    """
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if deadline is None:
            reply = answer(lambda request=request: _dispatch(engine, request))  # type: ignore[misc]
        else:
            reply = forked(lambda request=request: answer(lambda: _dispatch(engine, request)), deadline,
                           request.get("op"))  # fmt: skip
        proto.write(encoded(reply, request.get("op")))


def forked(call: Any, deadline: float, op: object, encode: Any = encoded) -> dict[str, Any]:
    """``call()`` (a protocol answer) in a forked child, or why it gave none: died, or past ``deadline``.

    Why fork: a user's code that crashed once will likely crash on the
    examples Hypothesis shrinks it to; starting a fresh worker (importing
    torch) for each costs seconds, a fork milliseconds. The child never
    returns: it writes its answer to a pipe and leaves with :func:`os._exit`.
    """
    import selectors
    import signal

    from crossattn_sizing.base.processes import describe_exit, end_tree

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, then leave without running anything of the parent's
        os.close(read)
        try:
            data = encode(call(), op).encode()
            with os.fdopen(write, "wb") as out:
                out.write(data)
        finally:
            os._exit(0)
    os.close(write)
    chunks: list[bytes] = []
    ends = time.monotonic() + deadline
    timed_out = False
    with selectors.DefaultSelector() as selector:
        selector.register(read, selectors.EVENT_READ)
        while True:
            left = ends - time.monotonic()
            if left <= 0 or not selector.select(left):
                timed_out = True
                break
            chunk = os.read(read, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(read)
    if timed_out:  # the child and whatever it started (its orphans are this worker's: a subreaper)
        end_tree(pid, include_root=True)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if timed_out:
        return {"ok": False, "kind": "TimedOut", "error": f"TimedOut: {deadline:g}"}
    try:
        return json.loads(b"".join(chunks))
    except ValueError:  # nothing, or half an answer: the child left during the call
        code = os.waitstatus_to_exitcode(status)
        return {"ok": False, "kind": "Died", "error": f"Died: {describe_exit(code)} while running {op}"}


def serve_subject(load: str, device: str, proto: Any, fork: float | None = None) -> int:
    """The loop for a user's own code: load it, answer its requests, then leave at once.

    The current folder and ``PYTHONPATH`` come first on ``sys.path``, as in the
    judge (:func:`~crossattn_sizing.base.callables.user_path_first`), so
    ``module:attr`` names what it names there. The exit is
    :func:`os._exit`: a thread the user's code left running must not keep the
    worker (and so the judge, which waits for it) alive.
    """
    from crossattn_sizing.base import interrupts
    from crossattn_sizing.base.callables import user_path_first

    kind, _, spec = load.partition("=")
    user_path_first()
    # Every process the user's code starts stays a descendant of this one or of its supervisor, one that
    # calls setsid() or outlives its parent included, so each is ended by its id when the worker ends;
    # a judge killed outright is watched for, even while a call hangs.
    leave = supervised(proto)
    # The worker leads its own session, so no terminal Ctrl-C reaches it: with SIGINT recorded here, a
    # KeyboardInterrupt the user's code raises is said to be theirs (usercode), not taken as a press.
    stack = contextlib.ExitStack()
    stack.enter_context(interrupts.handling(restore=False))
    loop, dumps = bind_loop(proto, fork), json.dumps  # before the user's import: see bind_loop
    try:
        ops, ready = _load(kind, spec, device)
    except BaseException as exc:  # reported to the parent as one line, then exit
        proto.write(dumps({"ready": False, **failure(exc)}) + "\n")
        leave(1)
    proto.write(dumps({"ready": True, **ready}) + "\n")
    try:
        loop(ops)
    finally:
        leave(0)


if __name__ == "__main__":
    sys.exit(main())
