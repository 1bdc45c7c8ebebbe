"""The worker process that runs one TensorRT-LLM tree's cross-pool sizing for the harness.

``python -m crossattn_sizing.engine.tensorrt_llm.worker --root DIR``: the JSON
lines protocol of the other engines' workers (:mod:`crossattn_sizing.engine.worker`):
a ready line (what was compiled, and the signature problem if there is one),
then one answer per request. The tree's code never runs in the judge's process.

Op ``traced_layout`` (the same fields) answers as ``layout`` does, with
``"lines"``: the line numbers of ``_get_cross_kv_cache_layout`` that ran
(``sys.settrace`` over that call): where ``report`` finds the line that gave
the pool its length, as the tree's code ran, never assumed from a commit.

Op ``layout`` (``hf_config``, ``max_seq_len``, ``max_input_len``) runs
``KvCacheCreator._get_cross_kv_cache_layout()`` on a stand-in ``self`` holding
only what it reads: ``_model_engine.model.model_config.pretrained_config``
(the HF config's keys as attributes), ``_max_seq_len`` and
``_llm_args.max_input_len``. The answer is ``{"verdict": "ran", "layout":
[num_layers, num_kv_heads, head_dim, max_seq_len]}``, or ``{"verdict": "not
run", "reason": ...}`` when the tree's code raised (a stand-in used, an
attribute the stand-in ``self`` lacks, the engine's own refusal) or returned
something else: the harness learned nothing about the pool then. The same
answer, to every request, when building the class already stopped (a
decorator or a default value that uses a stand-in: the tree's code runs
then too) or the harness's parser gave up on the file; the ready line says so.

The worker sits under a supervisor and is a child subreaper
(:func:`~crossattn_sizing.engine.protocol.supervised`), as the workers running
a user's code do: whatever the tree's code starts, in a session of its own
too, is ended by its id when the worker ends or is killed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import FrameType, SimpleNamespace
from typing import Any, NoReturn

from crossattn_sizing.engine.protocol import engine_line, failure, protocol_stdout, serve, supervised


def stopped_at(exc: BaseException, path: Path) -> str:
    """``_util.py:LINE`` where the tree's code stopped (the file alone when no frame of it is in the
    trace: no line is made up)."""
    from crossattn_sizing.engine.tensorrt_llm.source import UTIL

    line = engine_line(exc, str(path))
    return f"{UTIL}:{line}" if isinstance(line, int) else UTIL


def what_stopped(exc: BaseException) -> str:
    """What the tree's code did that stopped it, for a "not run" line: the stand-in it used, by name, or
    what it raised (its own errors keep their kind: ``ValueError: ...``)."""
    from crossattn_sizing.engine.tensorrt_llm.source import StandInUsed

    if isinstance(exc, StandInUsed):
        return str(exc)
    return f"raised {type(exc).__name__}: {exc}"


class Tree:
    """One tree's sizing, compiled and bound to stand-ins, ready to be asked.

    ``problem``: why no request can be answered (a changed signature, the class not built, a file the
    harness's parser gave up on), or None. A tree the harness cannot use at all (no ``_util.py``, no
    sizing) raises :class:`~crossattn_sizing.base.errors.ReleaseUnavailable`: bad input.
    """

    def __init__(self, root: Path) -> None:
        from crossattn_sizing.core.cross_pool import CrossPoolNotRun
        from crossattn_sizing.engine.tensorrt_llm.source import CLASS, StandIn, read_layout_source

        self.file = str(root)
        self.cls: Any = None
        try:
            self.source = read_layout_source(root)
        except CrossPoolNotRun as exc:
            self.problem: str | None = str(exc)
            return
        self.file = str(self.source.path)
        self.problem = self.source.signature_problem
        namespace: dict[str, Any] = {"__name__": "crossattn_tensorrt_llm_util"}
        namespace.update({name: StandIn(what) for name, what in self.source.imports.items()})
        try:  # defines the class: its decorators and default values run, nothing else of the module
            exec(self.source.code, namespace)
        except BaseException as exc:  # the tree's code stopped while its class was built
            self.problem = self.problem or (
                f"{stopped_at(exc, self.source.path)}: building class {CLASS} (its decorators and default "
                f"values) {what_stopped(exc)}"
            )
            return
        self.cls = namespace[CLASS]

    def layout(
        self, hf_config: dict[str, Any], max_seq_len: int, max_input_len: int | None
    ) -> dict[str, Any]:
        """The tree's answer for one config: the layout tuple, or why it was not run."""
        from crossattn_sizing.engine.tensorrt_llm.source import QUALNAME

        if self.problem is not None:
            return {"verdict": "not run", "reason": self.problem}
        creator = object.__new__(self.cls)
        pretrained = SimpleNamespace(**hf_config)
        creator._model_engine = SimpleNamespace(model=SimpleNamespace(model_config=SimpleNamespace(
            pretrained_config=pretrained)))  # fmt: skip
        creator._max_seq_len = max_seq_len
        creator._llm_args = SimpleNamespace(max_input_len=max_input_len)
        try:
            out = creator._get_cross_kv_cache_layout()
        except Exception as exc:  # the tree's code stopped: no pool to judge
            where = stopped_at(exc, self.source.path)
            return {"verdict": "not run", "reason": f"{where}: {QUALNAME} {what_stopped(exc)}"}
        if not (isinstance(out, tuple) and len(out) == 4 and all(type(v) is int for v in out)):
            return {"verdict": "not run",
                    "reason": f"{QUALNAME} returned {out!r:.80}, not (num_layers, num_kv_heads, head_dim, "
                              "max_seq_len) as ints"}  # fmt: skip
        return {"verdict": "ran", "layout": list(out)}

    def traced_layout(
        self, hf_config: dict[str, Any], max_seq_len: int, max_input_len: int | None
    ) -> dict[str, Any]:
        """:meth:`layout`'s answer, with the lines of the sizing that ran (sorted): a report's code site."""
        from crossattn_sizing.engine.tensorrt_llm.source import FUNCTION

        ran: set[int] = set()
        path = self.file

        def each_line(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line":
                ran.add(frame.f_lineno)
            return each_line

        def each_call(frame: FrameType, event: str, arg: Any) -> Any:
            code = frame.f_code
            return each_line if code.co_filename == path and code.co_name == FUNCTION else None

        sys.settrace(each_call)
        try:
            out = self.layout(hf_config, max_seq_len, max_input_len)
        finally:
            sys.settrace(None)
        return {**out, "lines": sorted(ran)}


def main(argv: list[str] | None = None) -> NoReturn:
    """The loop: one JSON request a line on stdin, one answer a line on the real stdout (prints: stderr),
    under a supervisor (:func:`~crossattn_sizing.engine.protocol.supervised`); never returns."""
    parser = argparse.ArgumentParser(prog="crossattn_sizing.engine.tensorrt_llm.worker")
    parser.add_argument("--root", required=True, help="folder holding tensorrt_llm/")
    args = parser.parse_args(argv)
    proto = protocol_stdout()
    leave = supervised(proto)  # before any of the tree's code runs (building its class runs some)
    try:
        tree = Tree(Path(args.root))
    except BaseException as exc:  # reported to the parent as one line, then exit
        proto.write(json.dumps({"ready": False, **failure(exc)}) + "\n")
        leave(1)
    ready = {"ready": True, "path": args.root, "file": tree.file, "problem": tree.problem}
    proto.write(json.dumps(ready) + "\n")

    def dispatch(req: dict[str, Any]) -> Any:
        if req["op"] in ("layout", "traced_layout"):
            ask = tree.layout if req["op"] == "layout" else tree.traced_layout
            return ask(dict(req["hf_config"]), int(req["max_seq_len"]), req.get("max_input_len"))
        raise ValueError(f"unknown op {req['op']!r}")

    try:
        serve(proto, dispatch)
    finally:
        leave(0)


if __name__ == "__main__":
    sys.exit(main())
