"""One-line changes to vLLM 0.25.0's ``unified_attention`` under ``--impl vllm@<copy>``: caught or not.

``python benchmarks/unified_attention_mutations.py`` builds, per mutation, the
minimal 0.25.0 package of the recorded sources (tests/engine_tree.py, with the
Triton backend and ``triton_unified_attention.py``) with one line of
``unified_attention`` changed, and runs the two attention properties on it
(``pytest properties/test_attention.py -k matches_dense --impl vllm@<copy>``,
the engine budget of 10 examples per property, offline, an empty home and
engine cache). ``baseline`` changes nothing and must hold. The meta-test of
tests/test_engine_kernels.py uses ``context+1``; the others are held out. It
writes reports/unified_attention_mutations.md: per mutation the exit status,
the property that failed and the wall time. Figures, not a timed test.

Run it with another checkout's ``src`` first on ``PYTHONPATH`` (``--label``
names it) to see what that version of the harness makes of the same copies.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.engine_tree import FIXTURES, build_tree  # noqa: E402

REPORT = ROOT / "reports" / "unified_attention_mutations.md"
KERNEL = "triton_unified_attention.py"
MUTATIONS: dict[str, tuple[str, str] | None] = {
    "baseline": None,
    "context+1": ("    context_len = seq_len - cur_batch_query_len\n",
                  "    context_len = seq_len - cur_batch_query_len + 1\n"),
    "tile-mask-le": ("        tile_mask = seq_offset < max_seq_prefix_len\n",
                     "        tile_mask = seq_offset <= max_seq_prefix_len\n"),
    "row-offset+1": ("    block_table_offset = seq_idx * block_table_stride\n",
                     "    block_table_offset = seq_idx * block_table_stride + 1\n"),
    "no-segment-rescale": ("    segm_expsum = segm_expsum * tl.exp(segm_max - overall_max)\n",
                           "    segm_expsum = segm_expsum\n"),
}  # fmt: skip
"""Name -> (line, its replacement) in ``unified_attention``'s file: a key past the causal bound; one
key past the sequence in the tile mask; every request reading its row one entry late; the 3D
kernel's segments combined without rescaling to a common maximum."""


def run(name: str) -> dict[str, object]:
    """Build the copy for ``name``, run the properties on it, and return what happened."""
    text = (FIXTURES / "0.25.0" / KERNEL).read_text()
    change = MUTATIONS[name]
    if change is not None:
        if text.count(change[0]) != 1:
            raise SystemExit(f"{name}: the line to change is not in {KERNEL} exactly once")
        text = text.replace(*change)
    with tempfile.TemporaryDirectory(prefix=f"unified-{name}-") as tmp:  # removed afterwards
        root = Path(tmp)
        build_tree(root, "0.25.0", kernels=True, kernel_sources={KERNEL: text})
        env = dict(os.environ, CROSSATTN_OFFLINE="1", CROSSATTN_ENGINE_CACHE=str(root / "cache"),
                   HOME=str(root / "home"), TRITON_INTERPRET="1", HF_HUB_OFFLINE="1")  # fmt: skip
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "properties/test_attention.py", "--impl", f"vllm@{root}",
             "-k", "matches_dense", "-p", "no:cacheprovider", "-q", "-x"],
            capture_output=True, text=True, env=env, timeout=1800, cwd=ROOT, check=False,
        )  # fmt: skip
        wall = time.monotonic() - start
    summary = next((ln for ln in reversed(proc.stdout.splitlines()) if re.search(r"passed|failed", ln)), "")
    failed = re.findall(r"FAILED (\S+)", proc.stdout)
    why = re.search(r"(paged [^\"']*differs from dense attention[^\"']*|non-finite[^\"']*)", proc.stdout)
    return {"name": name, "exit": proc.returncode, "summary": summary.strip("= "), "failed": failed,
            "why": why.group(1) if why else "", "wall": wall}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"mutations to run (default all: {', '.join(MUTATIONS)})")
    parser.add_argument("--label", default="this checkout", help="what harness ran (for the report)")
    parser.add_argument("--report", type=Path, default=REPORT)
    args = parser.parse_args()
    unknown = [n for n in args.names if n not in MUTATIONS]
    if unknown:
        parser.error(f"unknown mutation {', '.join(unknown)} (choose from {', '.join(MUTATIONS)})")
    rows = []
    for name in args.names or list(MUTATIONS):
        result = run(name)
        print(f"{name}: exit {result['exit']} in {result['wall']:.0f} s: {result['summary']}", flush=True)
        rows.append(result)
    lines = [
        "# One-line changes to vLLM 0.25.0's unified_attention under `--impl vllm@<copy>`",
        "",
        f"`python benchmarks/unified_attention_mutations.py` ({args.label}); "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs.",
        "",
        "| mutation | exit | outcome | first failure | wall |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(f"| {r['name']} | {r['exit']} | {r['summary']} | {r['why'][:90]} | {r['wall']:.0f} s |")
    args.report.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
