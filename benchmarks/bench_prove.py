"""Throughput of ``prove``: vectorised numpy against plain Python loops.

Why a script and not a timed test: figures depend on the machine and its load,
so they are measured and reported, never asserted. Run:

    .venv/bin/python benchmarks/bench_prove.py [--runs 5]

Prints, per measurement, the configs checked, the median seconds over the runs
and configs/s. The Python loops run on a small sub-domain (their rate does not
depend on the domain's size): the harness's own scalar path (a RunnerConfig,
the policy and the admission functions per config, which is what a user
policy's fallback costs), and bare integer arithmetic per config, the fastest a
Python loop can be.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from crossattn_sizing.base.intmath import cdiv
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.policies import BUILTIN_POLICIES, alignment_multiple
from crossattn_sizing.prove import ABSENT, Domain, prove

# At least 10**7 configs, C = 1: every block size 1..512 with every kernel block size.
LARGE = {
    "block_sizes": "1-512",
    "dcp_sizes": "1",
    "max_model_lens": "1-4096:63",
    "encoder_budgets": "1-8192:63",
    "source_positions": "absent,0,448,1500,2048",
}
# About 1.3 * 10**7 configs: the "at least 10**7 in under a minute" figure, fixed costs included.
MEDIUM = LARGE | {
    "max_model_lens": "1-4096:128",
    "encoder_budgets": "1-8192:256",
    "source_positions": "absent,0,1500,2048",
}
SMALL = {
    "block_sizes": "1-64",
    "dcp_sizes": "1",
    "max_model_lens": "1-4096:512",
    "encoder_budgets": "1-8192:512",
    "source_positions": "absent,0",
}


def median_seconds(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def report(label: str, configs: int, seconds: float) -> None:
    print(f"{label:<60} {configs:>13,} configs  {seconds:9.3f} s  {configs / seconds:12.4g} configs/s")


def scalar_loop(domain: Domain, policy_name: str) -> int:
    """prove's own fallback for a policy with no vectorised form: a RunnerConfig and a call per config."""
    builtin = BUILTIN_POLICIES[policy_name]

    def opaque(config: RunnerConfig) -> tuple[int, ...]:
        return builtin(config)

    result = prove(domain, opaque)
    assert not result.vectorised
    return result.failures


def arithmetic_loop(domain: Domain) -> int:
    """mrv2-prefix's check as bare Python integer arithmetic: no objects per config."""
    t = domain.groups
    lengths = list(zip(*(a.tolist() for a in domain.lengths(0, domain.num_lengths)), strict=True))
    failures = 0
    for bs, kbs, c, _i in zip(*(a.tolist() for a in t), strict=True):
        bpk, a = bs // kbs, alignment_multiple(bs, "pow2")
        for m, encoder_budget, s in lengths:
            e = min(encoder_budget, max(m, encoder_budget))
            w = cdiv(cdiv(max(m, s if s != ABSENT else 0), bs * c), a) * a * bpk
            failures += cdiv(e, kbs * c) > w or cdiv(e, bs * c) * bpk > w
    return failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per measurement; the median is shown")
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs visible, median of {args.runs} runs")

    for name, spec in (("large", LARGE), ("medium", MEDIUM)):
        domain = Domain.parse(**spec)
        for policy in ("mrv2", "mrv2-prefix"):
            result = prove(domain, BUILTIN_POLICIES[policy])
            secs = median_seconds(lambda d=domain, p=policy: prove(d, BUILTIN_POLICIES[p]), args.runs)
            verdict = "holds" if result.holds else f"{result.failures:,} counterexamples"
            report(f"vectorised {policy} ({name}, {verdict})", domain.size, secs)

    small = Domain.parse(**SMALL)
    vec = median_seconds(lambda: prove(small, BUILTIN_POLICIES["mrv2-prefix"]), args.runs)
    report("vectorised mrv2-prefix (small sub-domain)", small.size, vec)
    loops = max(1, args.runs // 2)
    assert (
        arithmetic_loop(small)
        == scalar_loop(small, "mrv2-prefix")
        == prove(small, BUILTIN_POLICIES["mrv2-prefix"]).failures
    )
    report(
        "python loop, bare arithmetic (small)",
        small.size,
        median_seconds(lambda: arithmetic_loop(small), loops),
    )
    report(
        "python loop, prove's per-config fallback (small)",
        small.size,
        median_seconds(lambda: scalar_loop(small, "mrv2-prefix"), loops),
    )

    argv = ["prove", "--policy", "mrv2", "--no-progress"]
    for key, value in LARGE.items():
        argv += [f"--{key.replace('_', '-')}", value]
    exe = Path(sys.executable).with_name("crossattn-sizing")
    start = time.perf_counter()
    done = subprocess.run([str(exe), *argv], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    print(
        f"CLI end to end (start-up included), rc={done.returncode}: {wall:.2f} s\n"
        f"  crossattn-sizing {' '.join(argv)}"
    )


if __name__ == "__main__":
    main()
