"""Time of each ``prove --symbolic`` proof: built-in policies and the recorded vLLM trees.

Why a script and not a timed test: figures depend on the machine and its load,
so they are measured and reported, never asserted (the issue's target is under
5 s per proof on one core). Run on one core:

    taskset -c 0 .venv/bin/python benchmarks/bench_prove_symbolic.py [--runs 3]

Prints, per subject, the verdict, the paths evaluated, the median CPU seconds of
the process (z3 runs in it, single-threaded: what one core spends, whatever else
the machine runs) and the median, min and max wall seconds over the runs
(``taskset`` keeps the process on one core; on a loaded machine wall time is
the CPU time stretched by the other processes' share). The recorded trees are
read from tests/fixtures/ as the test suite lays them out
(tests/symbolic_trees.py), so the script runs from a clone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from crossattn_sizing.audit.extract import RUNNERS, read_runner  # noqa: E402
from crossattn_sizing.audit.modules import ModuleIndex  # noqa: E402
from crossattn_sizing.core.policies import BUILTIN_POLICIES  # noqa: E402
from crossattn_sizing.releases.sources import open_dir  # noqa: E402
from crossattn_sizing.symbolic.builtin import builtin_paths  # noqa: E402
from crossattn_sizing.symbolic.engine import runner_paths  # noqa: E402
from crossattn_sizing.symbolic.run import SymbolicResult, prove_symbolic  # noqa: E402
from tests.symbolic_trees import read_tree  # noqa: E402


def builtin(name: str) -> SymbolicResult:
    policy = BUILTIN_POLICIES[name]
    return prove_symbolic(name, policy, lambda enc, cfg: builtin_paths(enc, cfg, policy))


def tree(version: str, folder: Path) -> SymbolicResult:
    index = ModuleIndex(open_dir(read_tree(folder / version, version)))
    return prove_symbolic(f"vllm {version}", read_runner(index, "v2"), runner_paths(index, RUNNERS["v2"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        subjects = [(name, lambda n=name: builtin(n)) for name in BUILTIN_POLICIES]
        subjects += [(f"vllm {v} (recorded)", lambda v=v: tree(v, Path(tmp))) for v in ("0.24.0", "0.25.0")]
        print(f"{'subject':24} {'verdict':8} {'paths':>5} {'cpu s':>6} {'wall s':>7} {'min':>6} {'max':>6}")
        for label, prove in subjects:
            times, cpu, result = [], [], None
            for _ in range(runs):
                start, start_cpu = time.perf_counter(), time.process_time()
                result = prove()
                times.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
            assert result is not None
            print(
                f"{label:24} {result.outcome.value:8} {result.paths:>5} {statistics.median(cpu):>6.2f} "
                f"{statistics.median(times):>7.2f} {min(times):>6.2f} {max(times):>6.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
