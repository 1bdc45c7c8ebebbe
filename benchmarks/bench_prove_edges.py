"""Wall time of ``crossattn-sizing prove`` on a user's ``module:attr`` policy over the default edge domain.

Why: a user's policy has no vectorised form, so ``prove`` calls it once per
config; the default domain (:mod:`crossattn_sizing.prove.edges`) is sized so that
this takes well under a minute on 2 cores. This runs the CLI end to end
(start-up included) as a user would, on policies given as ``module:attr``:

* ``bench_prove_edges:replica``: a plain function computing the v0.34 widths
  (holds), defined below;
* ``tests.broken_policies:length_minus_one`` and ``:aligned_ceil_off_by_one``:
  one token short past a block edge or an aligned span (fail on a thin slice).

Run (writes reports/bench_prove_edges.md and prints the same):

    .venv/bin/python benchmarks/bench_prove_edges.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from crossattn_sizing.commands.prove import describe_edges
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.policies import widths
from crossattn_sizing.prove.edges import edge_domain

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "bench_prove_edges.md"
COMMAND = ".venv/bin/python benchmarks/bench_prove_edges.py --runs {runs}"
POLICIES = (
    "bench_prove_edges:replica",
    "tests.broken_policies:length_minus_one",
    "tests.broken_policies:aligned_ceil_off_by_one",
)


def replica(config: RunnerConfig) -> tuple[int, ...]:
    """What a user might write: the v0.34 sizing, as an opaque function."""
    return widths(config, "fixed", "gcd")


def run_cli(spec: str) -> tuple[float, int, dict]:
    """One end-to-end CLI run: wall seconds, exit status, and its JSON result."""
    exe = Path(sys.executable).with_name("crossattn-sizing")
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")])}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "prove.json"
        start = time.perf_counter()
        done = subprocess.run(
            [str(exe), "prove", "--policy", spec, "--no-progress", "--json", str(out)],
            capture_output=True, text=True, check=False, env=env, cwd=ROOT,
        )  # fmt: skip
        wall = time.perf_counter() - start
        if done.returncode not in (0, 1):
            raise SystemExit(f"prove --policy {spec} failed ({done.returncode}):\n{done.stderr}")
        return wall, done.returncode, json.loads(out.read_text())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="CLI runs per policy; the median is shown")
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        print(f"(ignoring arguments for other benchmarks: {' '.join(unknown)})", file=sys.stderr)
    parts = edge_domain()
    size = sum(p.size for p in parts)
    lines = [
        f"Regenerate: `{COMMAND.format(runs=args.runs)}`",
        "",
        "# prove on a user's module:attr policy, default (edge) domain",
        "",
        f"`crossattn-sizing prove --policy MODULE:ATTR` with no domain options, end to end (interpreter "
        f"start-up included), median of {args.runs} runs per policy, python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs visible, on a shared and noisy machine. The policy has no vectorised "
        "form, so prove calls it once per config.",
        "",
        f"Domain: {size:,} configs in {len(parts)} parts.",
        "",
        *(f"- {axis}: {text}" for axis, text in describe_edges(parts).items()),
        "",
        "| policy | verdict | configs checked | of the domain | counterexamples | wall s (median) "
        "| configs/s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    print("\n".join(lines), flush=True)
    for spec in POLICIES:
        runs = [run_cli(spec) for _ in range(args.runs)]
        wall = statistics.median(r[0] for r in runs)
        rc, data = runs[0][1], runs[0][2]
        verdict = "holds" if rc == 0 else "FAILS"
        checked = data["configs_checked"]
        row = (
            f"| `{spec}` | {verdict} | {checked:,} | {100 * checked / size:.0f}% "
            f"| {data['counterexamples_total']:,} | {wall:.1f} | {checked / wall:,.0f} |"
        )
        lines.append(row)
        print(row, flush=True)
    REPORT.write_text("\n".join(lines) + "\n")
    print(f"wrote {REPORT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
