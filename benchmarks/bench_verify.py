"""``crossattn-sizing verify`` (every built-in policy) against one plain run of the property suite.

Why: verify is the main job. It used to run the whole suite once per policy
(7 policies: 15.8x one suite run, issue 23); it now shares one run across the
policies (crossattn_sizing.runs.shared_run) and should take at most 3x one suite
run. This measures both on the same machine, back to back and alternating
(suite, verify, suite, verify, ...), so load from other work falls on both,
and prints the medians and their ratio. The machine is shared, so the load
average before each run and each command's CPU time (user + system of the
child, which other work does not inflate as much as wall time) are recorded.

Run (writes reports/bench_verify.md and prints the same figures):

    .venv/bin/python benchmarks/bench_verify.py [--pairs 2]

Both commands run as subprocesses with the environment of the nox ``tests``
session (profile ``ci``): the suite as ``python -m pytest properties``
(``--policy mrv2``), verify as ``crossattn-sizing verify`` with no
``--policy`` (all built-ins, prove rows included, findings searched).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from bench_suite_wall import ENV, load_average  # the nox tests session's environment; the load

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "bench_verify.md"
COMMAND = ".venv/bin/python benchmarks/bench_verify.py --pairs {pairs}"
SUITE = [sys.executable, "-m", "pytest", "properties", "-q", "-p", "no:cacheprovider",
         "--policy", "mrv2"]  # fmt: skip
VERIFY = [sys.executable, "-m", "crossattn_sizing", "verify"]


def timed(command: list[str]) -> tuple[float, float, int, str]:
    """Wall seconds, child CPU seconds, exit status and the output's last lines of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=dict(os.environ, **ENV), capture_output=True, text=True,
                          check=False)  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-3:])
    return wall, cpu, done.returncode, tail


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2, help="alternating (suite, verify) pairs")
    parser.add_argument("--no-report", action="store_true", help="print only, do not write reports/")
    parser.add_argument("--verify-json", type=Path, help="verify's --json FILE (each pair overwrites it): "
                        "its verdicts, to compare with another build's")  # fmt: skip
    args = parser.parse_args(argv)
    verify = VERIFY + (["--json", str(args.verify_json.resolve())] if args.verify_json else [])
    rows = []
    for i in range(args.pairs):
        for name, command in (("suite", SUITE), ("verify", verify)):
            load = load_average()
            wall, cpu, status, tail = timed(command)
            rows.append((i + 1, name, wall, cpu, status, load, tail))
            print(f"pair {i + 1} {name:6s} wall {wall:7.1f} s  cpu {cpu:7.1f} s  exit {status}  "
                  f"load before {load}", flush=True)  # fmt: skip
    med = {}
    for n in ("suite", "verify"):
        mine = [r for r in rows if r[1] == n]
        med[n] = (statistics.median(r[2] for r in mine), statistics.median(r[3] for r in mine))
    ratio_wall = med["verify"][0] / med["suite"][0]
    ratio_cpu = med["verify"][1] / med["suite"][1]
    pair_ratios = [v[2] / s[2] for s, v in zip(rows[::2], rows[1::2], strict=True)]
    (suite_wall, suite_cpu), (verify_wall, verify_cpu) = med["suite"], med["verify"]
    print(f"median wall: suite {suite_wall:.1f} s, verify {verify_wall:.1f} s, ratio {ratio_wall:.2f}")
    print(f"median cpu:  suite {suite_cpu:.1f} s, verify {verify_cpu:.1f} s, ratio {ratio_cpu:.2f}")
    print("per-pair wall ratios: " + ", ".join(f"{r:.2f}" for r in pair_ratios))
    if args.no_report:
        return
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# verify (every built-in policy) against one plain property-suite run",
        "",
        f"Regenerate: `{COMMAND.format(pairs=args.pairs)}`",
        "",
        f"{args.pairs} alternating pairs on this machine ({os.cpu_count()} CPUs visible, shared with other "
        f"work), {when}, python {sys.version.split()[0]}. Suite: `python {' '.join(SUITE[1:])}`; verify: "
        "`crossattn-sizing verify` (7 built-in policies, prove rows, findings). Environment of the nox "
        "`tests` session (profile `ci`). CPU is the child's user + system time.",
        "",
        f"- median wall: suite **{med['suite'][0]:.1f} s**, verify **{med['verify'][0]:.1f} s**: "
        f"ratio **{ratio_wall:.2f}**",
        f"- median CPU: suite {suite_cpu:.1f} s, verify {verify_cpu:.1f} s: ratio {ratio_cpu:.2f}",
        f"- per-pair wall ratios: {', '.join(f'{r:.2f}' for r in pair_ratios)}",
        "",
        "| pair | command | wall s | CPU s | exit | load average before (1/5/15 min) |",
        "| ---: | --- | ---: | ---: | ---: | --- |",
        *(f"| {p} | {n} | {w:.1f} | {c:.1f} | {s} | {load} |" for p, n, w, c, s, load, _ in rows),
        "",
    ]
    REPORT.write_text("\n".join(lines))
    print(f"wrote {REPORT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
