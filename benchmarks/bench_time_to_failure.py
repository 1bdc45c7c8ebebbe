"""Time and examples to the first counterexample: the harness's strategies against uniform random configs.

Why: the strategies in ``properties/capacity_strategies.py`` aim draws at what policies
get wrong (long contexts, width edges plus or minus one token, every cell of
the inputs' decision table, the stress corner first). This measures what that
is worth: for ``mrv2-prefix`` and each deliberately broken policy of
``tests/broken_policies.py``, how many examples and how many seconds it takes
to hit the first config that breaks coverage or allocation fit
(:func:`crossattn_sizing.core.capacity.violations` is the oracle), with

* ``harness``: Hypothesis drawing ``properties.capacity_strategies.capacity_cases()``,
  generation phase only (no pinned examples, no shrinking, no database), one
  ``@seed`` per trial;
* ``uniform``: a plain ``random.Random(seed)`` drawing every field uniformly
  over the widest ranges the strategies accept (see :func:`uniform_case`).

Medians over the seeds are reported, and the ratio uniform / harness (above 1:
the strategies find it faster). A trial that finds nothing within the budget
counts as the budget (a lower bound, marked with ``>=``). The boundary
policies (``tests.broken_policies.BOUNDARY``: one token past an edge) must be
found with at least 10 times fewer examples; every policy with no more.

Run (writes reports/bench_time_to_failure.md and prints the same table):

    .venv/bin/python benchmarks/bench_time_to_failure.py [--seeds 31] [--budget 5000]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from hypothesis import HealthCheck, Phase, given, seed, settings

from crossattn_sizing.core.capacity import violations
from crossattn_sizing.core.config import GroupKind, KVCacheGroup
from crossattn_sizing.core.policies import BUILTIN_POLICIES, Policy

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # properties/ and tests/ are imported as packages from the clone
    sys.path.insert(0, str(ROOT))

from properties.capacity_strategies import (  # noqa: E402
    MAX_DCP,
    MAX_DRAWN_BLOCK_SIZE,
    MAX_LEN,
    MAX_REQS,
    CapacityCase,
    capacity_cases,
)
from properties.config_strategies import draw_group, draw_interleave, encoder_decoder_config  # noqa: E402
from tests.broken_policies import BOUNDARY, BROKEN  # noqa: E402

BLOCK_SIZES = range(1, MAX_DRAWN_BLOCK_SIZE + 1)
T = TypeVar("T")

REPORT = ROOT / "reports" / "bench_time_to_failure.md"
COMMAND = ".venv/bin/python benchmarks/bench_time_to_failure.py --seeds {seeds} --budget {budget}"


class Found(Exception):
    """Raised inside the Hypothesis test at the first counterexample, to stop the search."""


@dataclass(frozen=True)
class Trial:
    examples: int  # examples drawn up to and including the first counterexample (budget if none)
    seconds: float  # wall time to that point (the whole trial if none)
    found: bool


# ---------------------------------------------------------------- the two generators


def harness_trial(policy: Policy, trial_seed: int, budget: int, stress_corner: bool = True) -> Trial:
    """Hypothesis on the harness's strategy; stops at the first example the oracle rejects."""
    count = 0
    hit: Trial | None = None
    start = time.perf_counter()

    @settings(
        max_examples=budget,
        phases=[Phase.generate],
        database=None,
        derandomize=False,
        deadline=None,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @seed(trial_seed)
    @given(case=capacity_cases(stress_corner=stress_corner))
    def search(case: CapacityCase) -> None:
        nonlocal count, hit
        count += 1
        if hit is None and violations(policy, case.config, case.encoder_lens):
            hit = Trial(count, time.perf_counter() - start, True)
        if hit is not None:
            raise Found

    with contextlib.suppress(Found):
        search()
    return hit or Trial(count, time.perf_counter() - start, False)


class RandomDraws:
    """The shared config builders' choices from ``random.Random``: every option alike, no aiming."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def pick(self, options: Sequence[T], label: str | None = None) -> T:
        return self.rng.choice(options)

    def between(self, lo: int, hi: int, label: str | None = None) -> int:
        return self.rng.randint(lo, hi)

    def flag(self, label: str | None = None) -> bool:
        return self.rng.random() < 0.5


def uniform_group(rng: random.Random, kind: GroupKind, dcp: int) -> KVCacheGroup:
    """A group with ``bs`` uniform in 1..MAX_DRAWN_BLOCK_SIZE and a uniform divisor as ``kbs``."""
    return draw_group(RandomDraws(rng), kind, BLOCK_SIZES, dcp)


def uniform_case(rng: random.Random) -> CapacityCase:
    """Every field uniform over the widest ranges ``capacity_cases`` accepts, with no aiming.

    ``M`` in 1..MAX_LEN; ``E`` and ``S`` each absent with probability 1/2, else
    uniform in 1..MAX_LEN (``S``: 0..MAX_LEN); ``B`` uniform in ``M..MAX_LEN``
    (the engine needs ``B >= M``); ``C`` in 1..MAX_DCP; a cross group and 0..2
    other groups of uniform kind at a uniform position, each with ``bs`` in
    1..MAX_DRAWN_BLOCK_SIZE and a uniform divisor as ``kbs``, sharded or not
    uniformly under DCP; a uniform valid interleave; ``max_num_reqs`` in
    1..MAX_REQS, prefix caching and 0..2 speculative blocks uniform;
    1..max_num_reqs requests with encoder lengths uniform in 1..bound.
    """
    m = rng.randint(1, MAX_LEN)
    e = None if rng.random() < 0.5 else rng.randint(1, MAX_LEN)
    s = None if rng.random() < 0.5 else rng.randint(0, MAX_LEN)
    b = rng.randint(m, MAX_LEN)
    c = rng.randint(1, MAX_DCP)
    others = [
        uniform_group(rng, rng.choice((GroupKind.FULL, GroupKind.SLIDING_WINDOW, GroupKind.MAMBA)), c)
        for _ in range(rng.randint(0, 2))
    ]
    groups = list(others)
    groups.insert(rng.randint(0, len(others)), uniform_group(rng, GroupKind.CROSS, c))
    interleave = draw_interleave(RandomDraws(rng), groups, c)
    reqs = rng.randint(1, MAX_REQS)
    mamba = (rng.random() < 0.5, rng.randint(0, 2))
    config = encoder_decoder_config(groups, m, b, e, s, (c, interleave), reqs, mamba)
    bound = min(config.encoder_budget, config.max_num_batched_tokens)
    return CapacityCase(config, tuple(rng.randint(1, bound) for _ in range(rng.randint(1, reqs))))


def uniform_trial(policy: Policy, trial_seed: int, budget: int) -> Trial:
    rng = random.Random(trial_seed)
    start = time.perf_counter()
    for i in range(1, budget + 1):
        case = uniform_case(rng)
        if violations(policy, case.config, case.encoder_lens):
            return Trial(i, time.perf_counter() - start, True)
    return Trial(budget, time.perf_counter() - start, False)


GENERATORS: dict[str, Callable[[Policy, int, int], Trial]] = {
    "harness": harness_trial,
    "uniform": uniform_trial,
    # Shown, not judged: what the decision table and edges find without the stress corner.
    "no-corner": functools.partial(harness_trial, stress_corner=False),
}


# ---------------------------------------------------------------- report


def median_text(values: list[float], censored: bool, fmt: str) -> str:
    text = format(statistics.median(values), fmt)
    return f">={text}" if censored else text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=31, help="trials per policy and generator")
    parser.add_argument("--budget", type=int, default=5000, help="examples per trial before giving up")
    # The nox `benchmarks` session passes the same arguments to every script: ignore others'.
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        print(f"(ignoring arguments for other benchmarks: {' '.join(unknown)})", file=sys.stderr)

    policies: dict[str, Policy] = {"mrv2-prefix": BUILTIN_POLICIES["mrv2-prefix"], **BROKEN}
    seeds = range(args.seeds)
    header = (
        "| policy | harness examples | uniform examples | examples ratio | harness s | uniform s "
        "| time ratio | found (harness / uniform) | target | harness without stress corner: examples |"
    )
    lines = [
        f"Regenerate: `{COMMAND.format(seeds=args.seeds, budget=args.budget)}`",
        "",
        "# Time to the first counterexample: harness strategies vs uniform random",
        "",
        f"Medians over {args.seeds} seeds (0..{args.seeds - 1}) per policy and generator, budget "
        f"{args.budget} examples per trial, measured in one run on a shared 2-core machine "
        f"(python {sys.version.split()[0]}). "
        "Oracle: `crossattn_sizing.core.capacity.violations` (coverage or "
        "allocation fit). `harness`: Hypothesis on `properties.capacity_strategies.capacity_cases()`, "
        "generation phase only. `uniform`: `random.Random(seed)` drawing every field uniformly over the "
        "widest ranges the strategies accept (lengths 1..2^21, block sizes 1..512, DCP 1..8; `uniform_case` "
        "in the script). Ratios are uniform / harness medians: above 1 means the strategies get there "
        "sooner. `>=` marks a median that is a trial without a counterexample (the budget, a lower "
        "bound). Target: examples ratio >= 10 for the boundary policies (one token past an edge: "
        f"{', '.join(f'`{b}`' for b in BOUNDARY)}), >= 1 for every other. The last column runs the "
        "harness with its stress corner left out (`capacity_cases(stress_corner=False)`): what the "
        "decision table and width edges find on their own.",
        "",
        header,
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    missed: list[str] = []
    print("\n".join(lines), flush=True)
    spent = {g: [0, 0.0] for g in GENERATORS}  # examples and seconds over every trial
    for name, policy in policies.items():
        trials = {g: [fn(policy, s, args.budget) for s in seeds] for g, fn in GENERATORS.items()}
        for g, ts in trials.items():
            spent[g][0] += sum(t.examples for t in ts)
            spent[g][1] += sum(t.seconds for t in ts)
        med: dict[str, dict[str, float]] = {}
        cells: dict[str, dict[str, str]] = {}
        for g, ts in trials.items():
            ex = [float(t.examples) for t in ts]
            secs = [t.seconds for t in ts]
            # The median is censored if it is not below every trial that found nothing.
            censored = any(not t.found and t.examples <= statistics.median(ex) for t in ts)
            med[g] = {"examples": statistics.median(ex), "seconds": statistics.median(secs)}
            cells[g] = {
                "examples": median_text(ex, censored, "g"),
                "seconds": median_text(secs, censored, ".4f"),
                "found": f"{sum(t.found for t in ts)}/{len(ts)}",
            }
        ex_ratio = med["uniform"]["examples"] / med["harness"]["examples"]
        t_ratio = med["uniform"]["seconds"] / med["harness"]["seconds"]
        need = 10.0 if name in BOUNDARY else 1.0
        met = ex_ratio >= need
        if not met:
            missed.append(name)
        row = (
            f"| `{name}` | {cells['harness']['examples']} | {cells['uniform']['examples']} | {ex_ratio:.2f} "
            f"| {cells['harness']['seconds']} | {cells['uniform']['seconds']} | {t_ratio:.2f} "
            f"| {cells['harness']['found']} / {cells['uniform']['found']} "
            f"| {'met' if met else 'MISSED'} (>= {need:g}) | {cells['no-corner']['examples']} |"
        )
        lines.append(row)
        print(row, flush=True)
    cost = {g: 1e6 * secs / max(1, n) for g, (n, secs) in spent.items()}
    tail = [
        "",
        f"Cost per example, over all trials: harness {cost['harness']:,.0f} µs (Hypothesis drawing "
        f"`capacity_cases()` plus the oracle), uniform {cost['uniform']:,.0f} µs "
        f"(harness / uniform = {cost['harness'] / cost['uniform']:.1f}). So the time ratio is the "
        "examples ratio divided by roughly that factor.",
        "",
        f"Target met on {len(policies) - len(missed)} of {len(policies)} policies"
        + (f"; missed: {', '.join(missed)}." if missed else "."),
    ]
    lines += tail
    print("\n".join(tail))
    text = "\n".join(lines) + "\n"
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(text)
    print(f"wrote {REPORT.relative_to(ROOT)}")


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
