"""Examples per second of each property under the ``ci`` profile.

Why a script and not a timed test: throughput depends on the machine and its
load, so it is measured and reported, never asserted. It says what a CI run's
Hypothesis budget buys, and which property to make cheaper first.

Run (writes reports/bench_properties.md and prints the same table):

    .venv/bin/python benchmarks/bench_properties.py [--runs 3] [--policy mrv2]

Each run drives the whole property suite in-process through
:func:`crossattn_sizing.runs.suite.run_suite` (``properties/``, ``ci`` profile:
derandomized, so every run draws the same examples). Examples are the test
cases Hypothesis ran, all phases together (pinned examples, generation, and
shrinking where a property fails); seconds are pytest's call time for the
property, all its parametrizations. The median over the runs is shown.

CPU seconds (this process's, from one test's teardown to the next, so set-up
is included) are shown beside wall seconds: on a machine shared with other
jobs wall time measures the neighbours as much as the property.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from crossattn_sizing.findings.results import PropertyResult
from crossattn_sizing.runs.suite import run_suite

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "bench_properties.md"
COMMAND = ".venv/bin/python benchmarks/bench_properties.py --runs {runs}{select}"

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # as in the nox sessions: nothing is fetched
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRITON_INTERPRET", "1")


def one_run(policy: str, select: list[str]) -> tuple[dict[str, PropertyResult], dict[str, float]]:
    """One suite run: results by property, and CPU seconds by test node id."""
    cpu: dict[str, float] = {}
    last = [time.process_time()]

    def tick(_done: int, _total: int, nodeid: str) -> None:
        now = time.process_time()
        cpu[nodeid] = now - last[0]
        last[0] = now

    results, _code = run_suite(policy, profile="ci", select=select, on_progress=tick)
    return {r.name: r for r in results}, cpu


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of the suite; the median is shown")
    parser.add_argument(
        "--policy", action="append", help="sizing policy (repeatable; default mrv2, which holds)"
    )
    parser.add_argument("-k", dest="select", action="append", default=[], help="only properties matching")
    # The nox `benchmarks` session passes the same arguments to every script: ignore others'.
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        print(f"(ignoring arguments for other benchmarks: {' '.join(unknown)})", file=sys.stderr)
    policies = args.policy or ["mrv2"]

    rows = []
    for policy in policies:
        runs: list[dict[str, PropertyResult]] = []
        cpus: list[dict[str, float]] = []
        wall = []
        for i in range(args.runs):
            start = time.perf_counter()
            results, cpu = one_run(policy, args.select)
            runs.append(results)
            cpus.append(cpu)
            wall.append(time.perf_counter() - start)
            print(f"  {policy}: run {i + 1}/{args.runs} in {wall[-1]:.1f} s", file=sys.stderr, flush=True)
        for name in sorted(runs[0]):
            per_run = [r[name] for r in runs if name in r]
            examples = statistics.median(r.examples for r in per_run)
            seconds = statistics.median(r.duration_s for r in per_run)
            # A property with no Hypothesis examples is a plain (parametrized) test: no rate.
            rates = [r.examples / r.duration_s for r in per_run if r.duration_s > 0 and r.examples]
            outcomes = sorted({r.outcome for r in per_run})
            cpu_s = statistics.median(
                sum(c.get(n, 0.0) for n in r[name].nodeids)
                for r, c in zip(runs, cpus, strict=True)
                if name in r
            )
            rows.append(
                (
                    policy,
                    name,
                    "/".join(outcomes),
                    len(per_run[0].nodeids),
                    examples,
                    seconds,
                    statistics.median(rates) if rates else float("nan"),
                    cpu_s,
                )
            )
        rows.append((policy, "(whole suite, wall)", "", "", "", statistics.median(wall), float("nan"), 0.0))

    header = (
        "| policy | property | outcome | tests | examples | seconds | examples/s | CPU s "
        "| examples per CPU s |"
    )
    lines = [
        f"Regenerate: `{COMMAND.format(runs=args.runs, select=''.join(f' -k {k}' for k in args.select))}`",
        "",
        "# Property throughput (ci profile)",
        "",
        f"Median of {args.runs} runs of the property suite in-process (`run_suite`, profile `ci`, "
        f"derandomized), python {sys.version.split()[0]}, {os.cpu_count()} CPUs visible, "
        "shared and noisy machine. `tests` is the number of parametrizations; `examples` counts every "
        "Hypothesis test case of all of them (pinned examples and shrinking included); `seconds` is "
        "pytest's time for those tests; examples/s is the median of the per-run rates (`-`: not a "
        "Hypothesis test). CPU s is this process's CPU time for the property's tests (set-up "
        "included) and examples per CPU s the rate it allows: the machine is shared, so wall time "
        f"also measures other jobs (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
        "when this was written). The last row is the wall time of one whole in-process suite run.",
        "",
        header,
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for policy, name, outcome, tests, examples, seconds, rate, cpu_s in rows:
        ex = f"{examples:g}" if examples != "" else ""
        rate_text = ("" if examples == "" else "-") if rate != rate else f"{rate:,.0f}"
        cpu_text = f"{cpu_s:.2f}" if cpu_s else ""
        per_cpu = f"{examples / cpu_s:,.0f}" if cpu_s and examples else ("-" if cpu_s else "")
        lines.append(
            f"| {policy} | `{name}` | {outcome} | {tests} | {ex} | {seconds:.2f} | {rate_text} "
            f"| {cpu_text} | {per_cpu} |"
        )
    text = "\n".join(lines) + "\n"
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(text)
    print(text)
    print(f"wrote {REPORT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
