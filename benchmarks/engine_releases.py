"""What each vLLM release needs to run on this machine, and what its own code does with the Nemotron shape.

``python benchmarks/engine_releases.py 0.24.0 0.25.0 ...`` (default: the
releases already unpacked in the engine cache) installs each release as the
adapter does, runs its executed sizing and its BlockTables + slot-mapping
kernel on the Nemotron-Parse shape (3329 encoder tokens, M=2048, bs=16), and
writes reports/engine_releases.md: packages added, shims, import time, widths,
verdicts, wall time per release. Figures, not a timed test.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.core.config import KVCacheGroup, RunnerConfig
from crossattn_sizing.engine.client import close_all
from crossattn_sizing.engine.install import MANIFEST, default_engine_cache, read_manifest
from crossattn_sizing.engine.vllm.adapters import VllmPolicy
from crossattn_sizing.engine.vllm.coverage import engine_coverage
from crossattn_sizing.engine.vllm.shims import CPU_SHIMS

NEMOTRON = RunnerConfig(
    2048, 4096, (KVCacheGroup("full", 16), KVCacheGroup("cross", 16)),
    max_num_encoder_input_tokens=3329, max_num_reqs=4,
)  # fmt: skip
REPORT = Path(__file__).resolve().parent.parent / "reports" / "engine_releases.md"


def one(version: str) -> list[str]:
    start = time.perf_counter()
    try:
        policy = VllmPolicy(f"vllm=={version}")
    except ReleaseUnavailable as exc:
        wall = f"{time.perf_counter() - start:.0f}"
        return [version, "-", "-", "-", "-", f"could not run: {exc}", "-", wall]
    ready = policy.worker.ready if policy.worker else {}
    blocks = policy.sizing(NEMOTRON)["blocks"][1]
    pair = engine_coverage(policy, NEMOTRON, [3329, 100], first_row=0)
    last = engine_coverage(policy, NEMOTRON, [3329])

    def verdict(r) -> str:  # type: ignore[no-untyped-def]
        if r.holds:
            return "holds"
        return "crash: " + r.problems[0].split("died", 1)[-1].strip()[:60] if r.crashed else "FAILS: " + (
            r.problems[-1][:90])

    close_all()  # one release at a time: their imports do not share a process anyway
    packages = ", ".join(ready.get("added_modules", [])) or "none"
    shims = ", ".join(ready.get("shims", []))
    return [version, packages, shims, f"{ready.get('import_s', 0):.0f}", f"{blocks} (needs 209)",
            verdict(pair), verdict(last), f"{time.perf_counter() - start:.0f}"]  # fmt: skip


def manifest_table() -> int:
    """The needs of every unpacked release, as their manifests recorded them on their last start."""
    cache = default_engine_cache()
    found = sorted((p for p in cache.glob("vllm-*") if p.is_dir()),
                   key=lambda p: tuple(int(x) for x in p.name.removeprefix("vllm-").split(".")))  # fmt: skip
    lines = [
        "# What each vLLM release needed to run its block-table code on this CPU machine",
        "",
        "Command: `python benchmarks/engine_releases.py --manifests` (reads "
        f"`{cache.name}/vllm-X/{MANIFEST}`, written by each release's worker on start).",
        "",
        "Every release: `pip install --no-deps --target <cache>/vllm-X` from the cached wheel, then the "
        "modules below into the shared `<cache>/deps` (each alone, `--no-deps`, constraints pinning "
        "torch and triton), CPU shims as listed (docs/engine.md). Torch 2.13.0 (CPU), triton 3.9.0 and "
        "what the harness itself installs (numpy, pydantic, transformers, ...) come from the environment.",
        "",
        "| release | installed for it (first needed by this release) "
        "| modules its import chain took from deps/ | shims | import s |",
        "|---|---|---|---|---|",
    ]
    for target in found:
        m = read_manifest(target)
        lines.append(
            f"| {target.name.removeprefix('vllm-')} | {', '.join(m.get('packages', [])) or '-'} | "
            f"{', '.join(m.get('imported_from_deps', [])) or '(not started)'} | "
            f"{', '.join(m.get('shims', [])) or '-'} | {m.get('import_s', '-')} |"
        )
    out = REPORT.with_name("engine_needs.md")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*")
    parser.add_argument("--manifests", action="store_true",
                        help="only tabulate what the cache's manifests recorded (no run)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.manifests:
        return manifest_table()
    versions = args.versions or sorted(
        p.name.removeprefix("vllm-") for p in default_engine_cache().glob("vllm-*") if p.is_dir()
    )
    head = ["release", "modules imported from deps/ (pip --no-deps --target, torch/triton pinned)",
            "CPU shims", "import s", "cross width (blocks)", "rows 0+1 (3329 + 100 tokens)",
            "last row (3329 tokens)", "wall s"]  # fmt: skip
    rows = []
    for v in versions:
        row = one(v)
        print(" | ".join(row), flush=True)
        rows.append(row)
    lines = [
        "# vLLM releases run by the engine adapter on this CPU machine",
        "",
        f"Command: `python benchmarks/engine_releases.py {' '.join(versions)}`",
        "",
        "Shape: Nemotron-Parse page of 3329 encoder tokens, --max-model-len 2048, block size 16, "
        "E = 3329 (209 blocks needed). Each release in its own worker process; figures from one run "
        "on a shared 2-core machine (import times are noisy).",
        "",
        "Shims (the whole compatibility layer; everything else is the release's own code):",
        "",
        *[f"- `{k}`: {v}" for k, v in CPU_SHIMS.items()],
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *["| " + " | ".join(r) + " |" for r in rows],
        "",
    ]
    REPORT.write_text("\n".join(lines))
    print(f"wrote {REPORT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
