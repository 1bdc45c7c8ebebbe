"""Wall time of the whole test suite as CI runs it, on this machine.

Why: CI has a fixed time budget and 2 cores; this says how much of it the
suite uses and which tests dominate, so a growing suite is noticed before it
times out. One run by default (the suite takes minutes); ``--runs N`` takes
the median of N.

Run (writes reports/bench_suite_wall.md and prints the same figures):

    .venv/bin/python benchmarks/bench_suite_wall.py [--runs 1]

It runs ``python -m pytest --durations=15`` in the repository root with the
environment of the nox ``tests`` session (``CROSSATTN_PROFILE=ci``,
``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1``, ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "bench_suite_wall.md"
COMMAND = ".venv/bin/python benchmarks/bench_suite_wall.py --runs {runs}"
ENV = {
    "CROSSATTN_PROFILE": "ci",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TRITON_INTERPRET": "1",
}
_SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed|errors?)\b.*? in [\d.]+s.*?)\s*=*$", re.M)
_FAILED = re.compile(r"^(?:FAILED|ERROR) .+$", re.M)
_DURATION = re.compile(r"^\d+\.\d+s (?:call|setup|teardown) .+$", re.M)


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def one_run(ignore: list[str]) -> tuple[float, int, str]:
    """Wall seconds, exit code and pytest's output of one suite run."""
    env = dict(os.environ, **ENV)
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--durations=15",
            "-q",
            "-p",
            "no:cacheprovider",
            *(f"--ignore={path}" for path in ignore),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return time.perf_counter() - start, done.returncode, done.stdout + done.stderr


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="suite runs; the median is shown")
    parser.add_argument(
        "--ignore",
        action="append",
        default=[],
        help="test path to leave out (repeatable; said in the report)",
    )
    # The nox `benchmarks` session passes the same arguments to every script: ignore others'.
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        print(f"(ignoring arguments for other benchmarks: {' '.join(unknown)})", file=sys.stderr)

    loads_before, walls, codes, outputs = [], [], [], []
    for i in range(args.runs):
        loads_before.append(load_average())
        wall, code, output = one_run(args.ignore)
        walls.append(wall)
        codes.append(code)
        outputs.append(output)
        print(f"  run {i + 1}/{args.runs}: {wall:.1f} s, pytest exit {code}", file=sys.stderr, flush=True)
    last = outputs[-1]
    summary = _SUMMARY.findall(last)
    slowest = _DURATION.findall(last)
    failed = _FAILED.findall(last)
    runs_text = "one run" if args.runs == 1 else f"median of {args.runs} runs"
    left_out = "".join(f" --ignore {path}" for path in args.ignore)
    lines = [
        "# Whole test suite wall time",
        "",
        f"Regenerate: `{COMMAND.format(runs=args.runs)}{left_out}`",
        "",
        "`python -m pytest` in the repository root with `CROSSATTN_PROFILE=ci HF_HUB_OFFLINE=1 "
        "TRANSFORMERS_OFFLINE=1 TRITON_INTERPRET=1`"
        + (f" (left out: {', '.join(f'`{p}`' for p in args.ignore)})" if args.ignore else "")
        + f", {runs_text}, on this machine "
        f"({os.cpu_count()} CPUs visible, shared with other work: load average before "
        f"{', '.join(loads_before)} over 1/5/15 min), {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC.",
        "",
        f"- wall time: **{statistics.median(walls):.1f} s** ({statistics.median(walls) / 60:.1f} min)"
        + ("" if args.runs == 1 else f"; runs: {', '.join(f'{w:.1f}' for w in walls)} s"),
        f"- pytest exit status: {', '.join(str(c) for c in codes)}",
        f"- pytest summary (last run): {summary[-1] if summary else '(not found)'}",
        "",
        *(
            ["Failing tests (last run; the wall time is of a failing run):", "", "```", *failed, "```", ""]
            if failed
            else []
        ),
        "Slowest 15 test phases (last run):",
        "",
        "```",
        *slowest,
        "```",
    ]
    text = "\n".join(lines) + "\n"
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(text)
    print(text)
    print(f"wrote {REPORT.relative_to(ROOT)}")
    if any(codes):
        print("note: the suite did not pass; the wall time is of a failing run", file=sys.stderr)


if __name__ == "__main__":
    main()
