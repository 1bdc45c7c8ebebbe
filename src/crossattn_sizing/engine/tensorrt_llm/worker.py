"""The worker process that runs one TensorRT-LLM tree's cross-pool sizing for the harness.

``python -m crossattn_sizing.engine.tensorrt_llm.worker --root DIR``: the JSON
lines protocol of the other engines' workers (:mod:`crossattn_sizing.engine.worker`):
a ready line (what was compiled, and the signature problem if there is one),
then one answer per request. The tree's code never runs in the judge's process.

Op ``layout`` (``hf_config``, ``max_seq_len``, ``max_input_len``) runs
``KvCacheCreator._get_cross_kv_cache_layout()`` on a stand-in ``self`` holding
only what it reads: ``_model_engine.model.model_config.pretrained_config``
(the HF config's keys as attributes), ``_max_seq_len`` and
``_llm_args.max_input_len``. The answer is ``{"verdict": "ran", "layout":
[num_layers, num_kv_heads, head_dim, max_seq_len]}``, or ``{"verdict": "not
run", "reason": ...}`` when the tree's code raised (a stand-in used, an
attribute the stand-in ``self`` lacks, the engine's own refusal) or returned
something else: the harness learned nothing about the pool then.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from crossattn_sizing.engine.protocol import engine_line, failure, protocol_stdout, serve


class Tree:
    """One tree's sizing, compiled and bound to stand-ins, ready to be asked."""

    def __init__(self, root: Path) -> None:
        from crossattn_sizing.engine.tensorrt_llm.source import CLASS, StandIn, read_layout_source

        self.source = read_layout_source(root)
        namespace: dict[str, Any] = {"__name__": "crossattn_tensorrt_llm_util"}
        namespace.update({name: StandIn(what) for name, what in self.source.imports.items()})
        exec(self.source.code, namespace)  # defines the class: its two methods, nothing of the module runs
        self.cls = namespace[CLASS]

    def layout(
        self, hf_config: dict[str, Any], max_seq_len: int, max_input_len: int | None
    ) -> dict[str, Any]:
        """The tree's answer for one config: the layout tuple, or why it was not run."""
        from crossattn_sizing.engine.tensorrt_llm.source import QUALNAME, UTIL

        if self.source.signature_problem is not None:
            return {"verdict": "not run", "reason": self.source.signature_problem}
        creator = object.__new__(self.cls)
        pretrained = SimpleNamespace(**hf_config)
        creator._model_engine = SimpleNamespace(model=SimpleNamespace(model_config=SimpleNamespace(
            pretrained_config=pretrained)))  # fmt: skip
        creator._max_seq_len = max_seq_len
        creator._llm_args = SimpleNamespace(max_input_len=max_input_len)
        try:
            out = creator._get_cross_kv_cache_layout()
        except Exception as exc:  # the tree's code stopped: no pool to judge
            where = f"{UTIL}:{engine_line(exc, str(self.source.path))}"
            return {"verdict": "not run", "reason": f"{where}: {QUALNAME} raised {type(exc).__name__}: {exc}"}
        if not (isinstance(out, tuple) and len(out) == 4 and all(type(v) is int for v in out)):
            return {"verdict": "not run",
                    "reason": f"{QUALNAME} returned {out!r:.80}, not (num_layers, num_kv_heads, head_dim, "
                              "max_seq_len) as ints"}  # fmt: skip
        return {"verdict": "ran", "layout": list(out)}


def main(argv: list[str] | None = None) -> int:
    """The loop: one JSON request a line on stdin, one answer a line on the real stdout (prints: stderr)."""
    parser = argparse.ArgumentParser(prog="crossattn_sizing.engine.tensorrt_llm.worker")
    parser.add_argument("--root", required=True, help="folder holding tensorrt_llm/")
    args = parser.parse_args(argv)
    proto = protocol_stdout()
    try:
        tree = Tree(Path(args.root))
    except BaseException as exc:  # reported to the parent as one line, then exit
        proto.write(json.dumps({"ready": False, **failure(exc)}) + "\n")
        return 1
    ready = {"ready": True, "path": args.root, "file": str(tree.source.path),
             "signature_problem": tree.source.signature_problem}  # fmt: skip
    proto.write(json.dumps(ready) + "\n")

    def dispatch(req: dict[str, Any]) -> Any:
        if req["op"] == "layout":
            return tree.layout(dict(req["hf_config"]), int(req["max_seq_len"]), req.get("max_input_len"))
        raise ValueError(f"unknown op {req['op']!r}")

    return serve(proto, dispatch)


if __name__ == "__main__":
    sys.exit(main())
