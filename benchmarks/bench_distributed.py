"""Throughput beyond one process: distributed DCP against the in-process simulation, and fuzzing fleets.

Why: real DCP ranks and fuzzing workers cost process start-up and messages;
this says what they cost on this machine, so a CI or nightly budget can be
sized. Figures, never asserted.

Run (writes reports/bench_distributed.md and prints the same tables):

    .venv/bin/python benchmarks/bench_distributed.py [--runs 3] [--fuzz-minutes 1] [--examples-per-round 50]

1. ``properties/test_distributed_dcp.py`` (C = 2 and 4, ``ci`` profile:
   derandomized, so every backend draws the same examples) in-process through
   :func:`crossattn_sizing.runs.suite.run_suite`, once per ``--dcp-backend``:
   examples per second of each property (its pytest call time, which includes
   the reference oracle and, for gloo, starting each process group once), the
   median over ``--runs``. The start-up of a group is also timed on its own.
2. ``crossattn-sizing fuzz --jobs N`` (N = 1, 2) on the capacity properties
   under ``mrv2`` for ``--fuzz-minutes``, against a private redis-server:
   examples of all workers together per second of wall time (process start-up
   included). Hypothesis reports a test's examples when the test ends, and the
   budget stops a run between tests, so rounds are kept small
   (``--examples-per-round``) to keep the count from being quantised.
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
from datetime import datetime, timezone
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "bench_distributed.md"
COMMAND = (".venv/bin/python benchmarks/bench_distributed.py --runs {runs} --fuzz-minutes {minutes} "
           "--examples-per-round {per_round}")
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TRITON_INTERPRET": "1"}
os.environ.update(ENV)
BACKENDS = ("inprocess", "gloo")


def property_rates(backend: str) -> dict[str, tuple[int, float]]:
    """``{property parametrization group: (examples, seconds)}`` of one run of the C = 2, 4 file."""
    from crossattn_sizing.runs.suite import run_suite

    results, code = run_suite("mrv2", profile="ci", select=["test_distributed_dcp"],
                              extra_args=["--dcp-backend", backend])
    if code != 0:
        raise SystemExit(f"the C = 2, 4 properties did not pass with --dcp-backend {backend} (exit {code})")
    return {r.name: (r.examples, r.duration_s) for r in results}


def group_start_seconds(dcp_size: int) -> float:
    """Wall time to start a gloo group of ``dcp_size`` ranks (import torch, rendezvous, load the impl)."""
    from crossattn_sizing.distributed.pool import RankPool

    pool = RankPool("gloo", dcp_size, "torch")
    start = time.perf_counter()
    pool.start()
    elapsed = time.perf_counter() - start
    pool.close()
    return elapsed


def fuzz_rate(workers: int, minutes: float, per_round: int) -> tuple[int, float]:
    """(examples of all workers, wall seconds) of one ``fuzz --jobs`` run against a private server."""
    from crossattn_sizing.base.settings import REDIS_URL
    from crossattn_sizing.fleet.server import RedisServer

    with tempfile.TemporaryDirectory() as tmp, RedisServer() as server:
        summary = Path(tmp) / "summary.json"
        cmd = [sys.executable, "-m", "crossattn_sizing", "fuzz", "--jobs", str(workers), "--minutes",
               str(minutes), "--policy", "mrv2", "-k", "test_capacity",
               "--examples-per-round", str(per_round), "--db", str(Path(tmp) / "db"),
               "--regressions", str(Path(tmp) / "regressions"), "--json", str(summary)]
        env = dict(os.environ, **{REDIS_URL: server.url})
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=minutes * 60 * 3 + 300)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"fuzz --jobs {workers}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
        data = json.loads(summary.read_text())
    return sum(p["examples"] for p in data["properties"]), wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--fuzz-minutes", type=float, default=1.0)
    parser.add_argument("--examples-per-round", type=int, default=50)
    args = parser.parse_args()

    rates: dict[str, dict[str, list[float]]] = {b: {} for b in BACKENDS}
    examples: dict[str, dict[str, int]] = {b: {} for b in BACKENDS}
    for _ in range(args.runs):
        for backend in BACKENDS:  # interleaved, so load drifts hit both alike
            for name, (n, seconds) in property_rates(backend).items():
                rates[backend].setdefault(name, []).append(n / seconds if seconds else 0.0)
                examples[backend][name] = n
    starts = {c: statistics.median(group_start_seconds(c) for _ in range(args.runs)) for c in (2, 4)}
    fuzz: dict[int, list[tuple[int, float]]] = {1: [], 2: []}
    for _ in range(args.runs):
        for n in fuzz:  # interleaved, as above
            fuzz[n].append(fuzz_rate(n, args.fuzz_minutes, args.examples_per_round))

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = [
        f"`{COMMAND.format(runs=args.runs, minutes=args.fuzz_minutes, per_round=args.examples_per_round)}`",
        "",
        "# Distributed DCP and fuzzing fleets: throughput",
        "",
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs visible, shared with other work (load average {load} at the end). "
        f"Medians of {args.runs} runs, measured in one session; ratios are of medians.",
        "",
        "## Distributed DCP against the in-process simulation",
        "",
        "`properties/test_distributed_dcp.py` under `mrv2`, profile `ci` (derandomized: both backends run "
        "the same examples). Seconds are pytest's call time, which includes the float64 reference oracle "
        "and, for gloo, starting each process group on the first example. The driver runs torch with "
        f"{torch.get_num_threads()} intra-op threads, each gloo rank with 1.",
        "",
        "| property | examples | in-process ex/s | gloo ex/s | gloo / in-process |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name in sorted(rates["inprocess"]):
        a = statistics.median(rates["inprocess"][name])
        b = statistics.median(rates["gloo"].get(name, [0.0]))
        lines.append(f"| `{name}` | {examples['inprocess'][name]} | {a:.1f} | {b:.1f} | "
                     f"{b / a if a else 0:.2f} |")
    lines += [
        "",
        "In process, the driver runs every rank's kernels one after the other; with gloo the ranks run "
        "them in parallel processes and the driver pays a pickled round trip per step and rank. Which is "
        "faster depends on the machine and its load; both columns include the float64 oracle, which runs "
        "in the driver either way.",
        "",
        "Starting a gloo process group (each rank imports torch, meets the others through a file "
        "rendezvous, loads the implementation), once per DCP size per session: "
        + ", ".join(f"C = {c}: {s:.2f} s" for c, s in starts.items()) + ".",
        "",
        "## Fuzzing throughput with 1 and 2 workers",
        "",
        f"`crossattn-sizing fuzz --jobs N --minutes {args.fuzz_minutes} --policy mrv2 -k test_capacity "
        f"--examples-per-round {args.examples_per_round}` "
        "against a private redis-server (Unix socket); examples of all workers together per second of "
        "wall time, process start-up included.",
        "",
        "| workers | examples (median) | wall s (median) | examples/s (median) | vs 1 worker |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    base = statistics.median(n / w for n, w in fuzz[1])
    for n, runs in fuzz.items():
        rate = statistics.median(e / w for e, w in runs)
        lines.append(f"| {n} | {statistics.median(e for e, _ in runs):.0f} | "
                     f"{statistics.median(w for _, w in runs):.1f} | {rate:.0f} | {rate / base:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    REPORT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
