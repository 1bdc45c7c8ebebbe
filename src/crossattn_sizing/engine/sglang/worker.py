"""The worker process that runs one SGLang tree's own functions for the harness.

``python -m crossattn_sizing.engine.sglang.worker --root DIR``: the same JSON
lines protocol as vLLM's worker (:mod:`crossattn_sizing.engine.worker`): a
ready line (the stand-ins in use, what was loaded), then one answer per
request. Each release runs in its own process: the functions it runs index
tensors with values a property drew, and a read past an allocation on a
device would take the process with it, not the harness.

Ops: ``metadata`` (``context_len``, ``batch`` = ``[[E, prompt, d], ...]``,
``path`` = ``eager`` or ``replay``) -> the verdict of
:func:`~crossattn_sizing.engine.sglang.run.run_metadata`; ``read`` (``context_len``,
``batch``) -> both paths' verdicts (:func:`~crossattn_sizing.engine.sglang.run.run_reads`);
``write`` -> the write side on the release's rows; ``fa3_path`` -> how the
release builds the text page table; ``width`` (``context_len``) -> the
release's row width; ``admission`` (``context_len``, ``kv_capacity``,
``requests`` = ``[[E, prompt, max_new], ...]``) -> the release's own limits and
each request admitted or refused, with its output cap
(:func:`~crossattn_sizing.engine.sglang.admission.run_admission`);
``startup`` (``context_len``, ``capture_bs``, ``max_running``, ``max_source_positions``) -> the
CUDA-graph runner's dummy batches judged on the capture and replay paths
(:func:`~crossattn_sizing.engine.sglang.startup.run_startup`);
``attention`` (``context_len``, ``batch``, the heads and
the packed content) -> the release's own ``TorchNativeAttnBackend`` on the
batch's cross-attention layer (:func:`~crossattn_sizing.engine.sglang.attention.run_attention`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, cast

from crossattn_sizing.engine.protocol import failure, protocol_stdout, serve, stack_on_request, supervised


def main(argv: list[str] | None = None) -> int:
    """The SGLang worker loop: one JSON request a line on stdin, one answer a line on the real stdout.

    The release's prints go to stderr, so they never corrupt the protocol.
    """
    parser = argparse.ArgumentParser(prog="crossattn_sizing.engine.sglang.worker")
    parser.add_argument("--root", required=True, help="folder holding sglang/")
    args = parser.parse_args(argv)
    proto = protocol_stdout()
    # The tree's code runs under a supervisor: whatever it starts, in a session of its own too, is ended
    # with it; and asked at a deadline, it says where it is (the step that hung).
    stack_on_request()
    leave = supervised(proto)
    start = time.perf_counter()
    root = Path(args.root)
    gap: dict[str, Any] | None = None  # the adapter cannot load this release: every answer is "not run"
    try:
        from crossattn_sizing.base.errors import ReleaseUnavailable
        from crossattn_sizing.engine.adapter import not_run
        from crossattn_sizing.engine.sglang.client import PATHS
        from crossattn_sizing.engine.sglang.run import (
            STAND_INS_DOC,
            SglangRelease,
            fa3_path,
            run_metadata,
            run_reads,
            run_write,
        )

        try:
            release: SglangRelease | None = SglangRelease.load(root)
        except ReleaseUnavailable:  # bad input (a syntax error, a release older than the table): one line
            raise
        except Exception as exc:  # a definition moved or renamed, a stand-in reached at load: not run
            release, gap = None, not_run(exc, "loading the release's definitions", root)
    except BaseException as exc:  # reported to the parent as one line, then exit
        proto.write(json.dumps({"ready": False, **failure(exc)}) + "\n")
        leave(1)
    own_stand_ins = release.range.stand_ins if release is not None else ()  # the range's, beyond the common
    proto.write(
        json.dumps(
            {
                "ready": True,
                "path": args.root,
                "shims": [name for name, _ in (*STAND_INS_DOC, *own_stand_ins)],
                "range": release.chosen if release else None,
                "import_s": round(time.perf_counter() - start, 2),
                "not_run": gap,
            }
        )
        + "\n"
    )

    def gap_answer(op: str) -> Any:
        """What each op answers when the release did not load: "not run" with the gap's reason."""
        assert gap is not None
        if op == "read":
            return {"paths": dict.fromkeys(PATHS, gap), "refused": False}
        if op == "startup":
            from crossattn_sizing.engine.sglang.startup import PATHS as STARTUP_PATHS

            return {"paths": dict.fromkeys(STARTUP_PATHS, gap)}
        if op == "fa3_path":
            return {"path": "not run", "reason": gap["reason"]}
        return None if op == "width" else gap  # width None: not known

    admission: list[Any] = []  # the release's admission steps, loaded on the first ``admission`` op

    def dispatch(req: dict[str, Any]) -> Any:
        op = req["op"]
        if op not in ("metadata", "read", "write", "fa3_path", "width", "admission", "attention", "startup"):
            raise ValueError(f"unknown op {op!r}")
        if release is None:
            return gap_answer(op)
        batch = cast("list[tuple[int, int, int]]", [tuple(int(x) for x in r) for r in req.get("batch", [])])
        if op == "metadata":
            return run_metadata(release, int(req["context_len"]), batch, str(req.get("path", "eager")))
        if op == "read":
            return run_reads(release, int(req["context_len"]), batch)
        if op == "write":
            return run_write(release, int(req["context_len"]), batch)
        if op == "fa3_path":
            return fa3_path(release)
        if op == "admission":
            from crossattn_sizing.engine.sglang.admission import run_admission

            requests = [(int(e), int(p), int(n)) for e, p, n in req.get("requests", [])]
            answer = run_admission(release.root, release.range, admission, int(req["context_len"]),
                                   int(req["kv_capacity"]), requests)
            try:  # the tree's own row beside its limits, for a failure's lines (None: its sizing raised)
                answer["row_width"] = int(req["context_len"]) + release.row_extra()
            except Exception:
                answer["row_width"] = None
            return answer
        if op == "startup":  # the CUDA-graph runner's dummy batches (engine/sglang/startup.py)
            from crossattn_sizing.engine.sglang.startup import run_startup

            source = req.get("max_source_positions")
            return run_startup(release, int(req["context_len"]), [int(b) for b in req["capture_bs"]],
                               int(req["max_running"]), None if source is None else int(source))
        if op == "attention":  # the release's own TorchNativeAttnBackend (engine/sglang/attention.py)
            from crossattn_sizing.engine.sglang.attention import run_attention

            return run_attention(release, req)
        try:
            return int(req["context_len"]) + release.row_extra()
        except Exception:  # the sizing function itself raised: the width is unknown, not a verdict
            return None

    leave(serve(proto, dispatch))


if __name__ == "__main__":
    sys.exit(main())
