"""``verify --engine SPEC`` for an engine with a pool of its own for cross K/V: the cross-pool property, run.

The property is the suite's (:mod:`properties.cross_pool_capacity`); it takes
the engine's sizer, not a sizing policy, so it is not a ``test_`` module the
suite run collects: it is called here with the sizer, under the profile,
example budget and seed verify was given, without an example database (the
verdict is this run's). It prints the verdict, a failure with its shrunk case
(model family, its encoder tokens, ``max_input_len``, the pool) and the
``check`` line that replays it alone. "holds" only when examples were judged
and held; a case the engine's code could not be asked about makes the
property "not run" with the reason.
"""

from __future__ import annotations

import argparse
from typing import Any

from crossattn_sizing.base.errors import OptionError
from crossattn_sizing.base.outcome import Outcome, exit_status
from crossattn_sizing.core.cross_pool import CrossPoolCase
from crossattn_sizing.engine.interface import EngineSuite

PROPERTY = "cross-pool capacity: admitted encoder tokens fit the pool"


def run_verify(spec: str, suite: EngineSuite, args: argparse.Namespace) -> int:
    """``verify --engine SPEC``: the capacity property over the cross-pool layout, with the engine's sizer
    (``suite.sizer``); the exit status (0 holds, 1 fails, 3 not run). The options it does not take (the
    report files, -k, --jobs, ...) were refused by the engine's family before this runs."""
    from hypothesis import seed as hypothesis_seed
    from hypothesis import settings

    from crossattn_sizing.findings.results import PropertyFailure, first_failure
    from crossattn_sizing.runs.profiles import register_profiles, selected_profile
    from crossattn_sizing.runs.suite import suite_module

    assert suite.sizer is not None  # verify routes here only a suite with a sizer
    sizer = _Counting(suite.sizer(args.call_timeout))
    prop = suite_module("cross_pool_capacity").encoder_tokens_fit_the_cross_pool
    register_profiles()
    profile = settings.get_profile(selected_profile(args.profile))
    budget = args.max_examples if args.max_examples is not None else profile.max_examples
    if budget < 1:
        raise OptionError("--max-examples", budget, "must be >= 1")
    # No example database: the verdict is this run's (a database would replay another tree's failures).
    prop = settings(profile, max_examples=budget, database=None)(prop)
    if args.seed is not None:
        prop = hypothesis_seed(args.seed)(prop)
    print(f"verify --engine {spec}: {sizer.function} (docs/engine.md)")
    failure: PropertyFailure | None = None
    reason = ""
    try:
        prop(sizer=sizer)
        outcome = Outcome.HOLDS if sizer.judged else Outcome.NOT_RUN
        reason = "" if sizer.judged else "no example was judged"
    except BaseException as raised:
        exc = first_failure(raised)
        if isinstance(exc, PropertyFailure):
            outcome, failure = Outcome.FAILS, exc
        elif type(exc).__name__ == "Skipped":  # pytest.skip(): the engine's code could not be asked
            outcome, reason = Outcome.NOT_RUN, str(exc)
        else:
            raise
    print(f"{'property':<{len(PROPERTY)}}  verdict   examples")
    print(f"{PROPERTY}  {outcome.value:<8}  {sizer.judged}")
    if failure is not None:
        for line in failure.diagnosis.splitlines():
            print(f"    {line}")
        print(f"    check: {failure.reproduce}")
    elif reason:
        print(f"    {reason}")
    return exit_status([outcome])


class _Counting:
    """A sizer that counts the cases it answered (a verdict of "holds" needs at least one)."""

    def __init__(self, sizer: Any) -> None:
        self.sizer = sizer
        self.name = sizer.name
        self.function = sizer.function
        self.judged = 0

    def pool_len(self, case: CrossPoolCase) -> int:
        """The wrapped sizer's answer, counted."""
        pool = int(self.sizer.pool_len(case))
        self.judged += 1
        return pool

    def __repr__(self) -> str:
        return repr(self.sizer)
