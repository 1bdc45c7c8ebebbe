"""The worker process that runs one SGLang tree's own functions for the harness.

``python -m crossattn_sizing.engine.sglang.worker --root DIR``: the same JSON
lines protocol as vLLM's worker (:mod:`crossattn_sizing.engine.worker`): a
ready line (the stand-ins in use, what was loaded), then one answer per
request. Each release runs in its own process: the functions it runs index
tensors with values a property drew, and a read past an allocation on a
device would take the process with it, not the harness.

Ops: ``metadata`` (``context_len``, ``batch`` = ``[[E, prompt, d], ...]``,
``path`` = ``eager`` or ``replay``) -> the verdict of
:func:`~crossattn_sizing.engine.sglang.run.run_metadata`; ``width``
(``context_len``) -> the release's row width.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, cast

from crossattn_sizing.engine.protocol import failure, protocol_stdout, serve


def main(argv: list[str] | None = None) -> int:
    """The SGLang worker loop: one JSON request a line on stdin, one answer a line on the real stdout.

    The release's prints go to stderr, so they never corrupt the protocol.
    """
    parser = argparse.ArgumentParser(prog="crossattn_sizing.engine.sglang.worker")
    parser.add_argument("--root", required=True, help="folder holding sglang/")
    args = parser.parse_args(argv)
    proto = protocol_stdout()
    start = time.perf_counter()
    root = Path(args.root)
    gap: dict[str, Any] | None = None  # the adapter cannot load this release: every answer is "not run"
    try:
        from crossattn_sizing.engine.adapter import not_run
        from crossattn_sizing.engine.sglang.run import STAND_INS_DOC, SglangRelease, run_metadata
        from crossattn_sizing.engine.sglang.source import TreeSyntaxError

        try:
            release: SglangRelease | None = SglangRelease.load(root)
        except TreeSyntaxError:
            raise
        except Exception as exc:  # a definition moved or renamed, a stand-in reached at load: not run
            release, gap = None, not_run(exc, "loading the release's definitions", root)
    except BaseException as exc:  # reported to the parent as one line, then exit
        proto.write(json.dumps({"ready": False, **failure(exc)}) + "\n")
        return 1
    proto.write(
        json.dumps(
            {
                "ready": True,
                "path": args.root,
                "shims": [name for name, _ in STAND_INS_DOC],
                "import_s": round(time.perf_counter() - start, 2),
                "not_run": gap,
            }
        )
        + "\n"
    )

    def dispatch(req: dict[str, Any]) -> Any:
        if req["op"] == "metadata":
            if release is None:
                return gap
            batch = cast("list[tuple[int, int, int]]", [tuple(int(x) for x in r) for r in req["batch"]])
            return run_metadata(release, int(req["context_len"]), batch, str(req.get("path", "eager")))
        if req["op"] == "width":  # None: not known (the release did not load)
            if release is None:
                return None
            try:
                return int(req["context_len"]) + int(release.extra_context_len())
            except Exception:  # the sizing function itself raised: the width is unknown, not a verdict
                return None
        raise ValueError(f"unknown op {req['op']!r}")

    return serve(proto, dispatch)


if __name__ == "__main__":
    sys.exit(main())
