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
release's row width.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, cast

from crossattn_sizing.engine.protocol import answer, failure


def main(argv: list[str] | None = None) -> int:
    """The SGLang worker loop: one JSON request a line on stdin, one answer a line on the real stdout.

    The release's prints go to stderr, so they never corrupt the protocol.
    """
    parser = argparse.ArgumentParser(prog="crossattn_sizing.engine.sglang.worker")
    parser.add_argument("--root", required=True, help="folder holding sglang/")
    args = parser.parse_args(argv)
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    start = time.perf_counter()
    try:
        from crossattn_sizing.engine.sglang.run import (
            STAND_INS_DOC,
            SglangRelease,
            fa3_path,
            run_metadata,
            run_reads,
            run_write,
        )

        release = SglangRelease.load(Path(args.root))
    except BaseException as exc:  # reported to the parent as one line, then exit
        proto.write(json.dumps({"ready": False, **failure(exc)}) + "\n")
        return 1
    proto.write(
        json.dumps(
            {
                "ready": True,
                "path": args.root,
                "shims": [name for name, _ in (*STAND_INS_DOC, *release.range.stand_ins)],
                "range": release.chosen,
                "import_s": round(time.perf_counter() - start, 2),
            }
        )
        + "\n"
    )

    def dispatch(req: dict[str, Any]) -> Any:
        batch = cast("list[tuple[int, int, int]]", [tuple(int(x) for x in r) for r in req.get("batch", [])])
        if req["op"] == "metadata":
            return run_metadata(release, int(req["context_len"]), batch, str(req.get("path", "eager")))
        if req["op"] == "read":
            return run_reads(release, int(req["context_len"]), batch)
        if req["op"] == "write":
            return run_write(release, int(req["context_len"]), batch)
        if req["op"] == "fa3_path":
            return fa3_path(release)
        if req["op"] == "width":
            return int(req["context_len"]) + release.row_extra()
        raise ValueError(f"unknown op {req['op']!r}")

    for line in sys.stdin:
        if line.strip():
            proto.write(json.dumps(answer(lambda line=line: dispatch(json.loads(line)))) + "\n")  # type: ignore[misc]
    return 0


if __name__ == "__main__":
    sys.exit(main())
