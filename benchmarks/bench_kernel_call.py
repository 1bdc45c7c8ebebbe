"""Where one interpreted kernel call of a Nemotron-Parse page goes, inside the vLLM worker (CPU time).

    .venv/bin/python benchmarks/bench_kernel_call.py [--rounds N]

The recorded 0.25.0 tree (tests/engine_tree.py) is imported in a child
process as the worker imports it (:class:`crossattn_sizing.engine.vllm.release.Engine`,
the CPU shims, ``TRITON_INTERPRET=1``); ``properties.test_attention.check_nemotron_parse``
(guarded, ``mrv2``: 2 x 3329 tokens, 1 head, head_dim 4) runs against a
``VllmImpl`` whose worker is that Engine behind the protocol's JSON (encode,
``json.dumps``, ``json.loads``, the op, and back), so the judge's side, the
protocol and the worker's side run under one clock. Then the decode kernel
(``decode_attention_fwd``, what the DCP properties run) over the page's caches.
Each child is timed with and without the interpreter shims named by
``--without`` (functions of :mod:`crossattn_sizing.engine.vllm.shims`, applied
by ``cpu_kernels``; default: the two that drop dead work, the overflow check
and the dtype table), alternately, and the kernels' answers are compared byte
for byte. Figures are CPU seconds of
the child (``time.process_time``): the machine may be shared; say its load.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("launch: copy args to host", "launch: copy args back", "launch: patch tl",
         "helper call: re-patch tl")  # fmt: skip


LATEST = ("_no_dead_overflow_check", "_np_dtype_once")
"""The shims compared by default: the two that drop the interpreter's dead work (added 2026-12-06)."""


def child(mode: str, tree: Path, without: list[str]) -> dict[str, Any]:
    """One measurement, in this (fresh) process: the page's calls, then the decode kernel over its caches."""
    os.environ.update({"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""})
    sys.path[:0] = [str(ROOT), str(tree)]
    from triton.runtime import interpreter

    from crossattn_sizing.engine.vllm import shims

    if mode == "off":
        for name in without:
            setattr(shims, name, lambda: False)
    spent: collections.defaultdict[str, float] = collections.defaultdict(float)
    clock = time.process_time
    helper_depth = [0]

    def timed(name: str, fn: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += clock() - start

        return run

    executor = interpreter.GridExecutor
    executor._init_args_hst = timed(PARTS[0], executor._init_args_hst)  # type: ignore[method-assign]
    executor._restore_args_dev = timed(PARTS[1], executor._restore_args_dev)  # type: ignore[method-assign]
    real_patch, real_helper = interpreter._patch_lang, interpreter.InterpretedFunction.__call__

    def patch_lang(fn: Any) -> Any:  # under the shim's wrapper (applied later): what reaches Triton's
        start = clock()
        try:
            return real_patch(fn)
        finally:
            spent[PARTS[3] if helper_depth[0] else PARTS[2]] += clock() - start

    def helper(self: Any, *args: Any, **kwargs: Any) -> Any:
        helper_depth[0] += 1
        try:
            return real_helper(self, *args, **kwargs)
        finally:
            helper_depth[0] -= 1

    interpreter._patch_lang = patch_lang
    interpreter.InterpretedFunction.__call__ = helper  # type: ignore[method-assign]

    import torch

    from crossattn_sizing.core.policies import BUILTIN_POLICIES
    from crossattn_sizing.engine.protocol import answer
    from crossattn_sizing.engine.tensors import decode, encode
    from crossattn_sizing.engine.vllm.adapters import VllmImpl
    from crossattn_sizing.engine.vllm.release import Engine
    from crossattn_sizing.engine.worker import _dispatch
    from properties import test_attention

    engine = Engine("cpu", shims.set_cpu_environment())
    answers: dict[str, Any] = {}
    sent: dict[str, Any] = {}

    class InProcess:
        """The worker's protocol without the pipe: the request and the answer still cross as JSON."""

        def __init__(self) -> None:
            self.ready = {"version": engine.version}

        def request(self, op: str, **payload: Any) -> Any:
            start = clock()
            line = json.dumps({"op": op, **payload})
            req = json.loads(line)
            spent[f"{op}: protocol (JSON, judge and worker)"] += clock() - start
            sent.setdefault(op, req)
            before = dict(spent)
            start = clock()
            reply = answer(lambda: _dispatch(engine, req))
            spent[f"{op}: the op in the worker"] += clock() - start
            for part in PARTS:
                spent[f"{op}| {part}"] += spent[part] - before.get(part, 0.0)
            start = clock()
            text = json.dumps(reply)
            out = json.loads(text)
            spent[f"{op}: protocol (JSON, judge and worker)"] += clock() - start
            if op != "kernels":  # its answer lists the shims, which differ between the modes
                answers.setdefault(op, text)
            return out["result"]

    impl = VllmImpl("vllm==0.25.0", worker=InProcess())
    test_attention.check_nemotron_parse(impl, BUILTIN_POLICIES["mrv2"], guarded=True)
    page = sent["backend_attention"]
    table, stride, lens = decode(page["table"]), page["row_stride"], decode(page["seq_lens"])
    width = -(-int(lens.max()) // decode(page["key_cache"]).shape[1])
    rows = torch.stack([table[i * stride : i * stride + width] for i in range(len(lens))]).contiguous()
    InProcess().request("paged_attention", query=page["query"], key_cache=page["key_cache"],
                        value_cache=page["value_cache"], req_to_token=encode(rows), seq_lens=page["seq_lens"],
                        scale=page["scale"])  # fmt: skip
    return {"spent": dict(spent), "answers": answers, "shims": engine.shims, "load": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="children per mode, run alternately")
    parser.add_argument("--without", nargs="+", default=list(LATEST), metavar="SHIM",
                        help="the shim functions left out of the 'without' children (default: %(default)s)")
    parser.add_argument("--child", nargs=3, metavar=("MODE", "TREE", "WITHOUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]), json.loads(args.child[2]))))
        return
    from crossattn_sizing.engine.vllm import shims

    unknown = [name for name in args.without if not callable(getattr(shims, name, None))]
    if unknown:
        parser.error(f"--without: no shim function {', '.join(unknown)} in engine/vllm/shims.py")
    sys.path.insert(0, str(ROOT))
    from tests.engine_tree import build_tree

    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="bench-kernel-call-") as scratch:
        tree = build_tree(Path(scratch) / "tree", "0.25.0", kernels=True)
        env = {**os.environ, "CROSSATTN_PROFILE": os.environ.get("CROSSATTN_PROFILE", "ci")}
        for _ in range(args.rounds):
            for mode in runs:
                done = subprocess.run([sys.executable, __file__, "--child", mode, str(tree),
                                       json.dumps(args.without)], env=env,
                                      capture_output=True, text=True, check=True)  # fmt: skip
                runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    first = runs["off"][0]["answers"]
    same = {op: all(r["answers"][op] == first[op] for rs in runs.values() for r in rs) for op in first}
    loads = [r["load"] for rs in runs.values() for r in rs]
    print(f"{args.rounds} children per mode, alternately; 1-min load {min(loads):.1f} to {max(loads):.1f} "
          f"({os.cpu_count()} CPUs); answers byte-identical (per op): {same}\n")  # fmt: skip
    keys = sorted({k for rs in runs.values() for r in rs for k, v in r["spent"].items()
                   if (":" in k or "|" in k) and v >= 0.0005})  # fmt: skip
    print(f"without: {', '.join(args.without)}\n")
    print("| CPU s (median) | without the shims | with them |\n| --- | ---: | ---: |")
    for key in keys:
        cells = [statistics.median(r["spent"].get(key, 0.0) for r in runs[m]) for m in runs]
        print(f"| {key} | {cells[0]:.3f} | {cells[1]:.3f} |")


if __name__ == "__main__":
    main()
