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
import unittest
from typing import TYPE_CHECKING, Any

from crossattn_sizing.base.errors import HarnessError, OptionError
from crossattn_sizing.base.outcome import Outcome, exit_status
from crossattn_sizing.core.cross_pool import CrossPoolCase, CrossPoolNotRun, harness_stopped
from crossattn_sizing.engine.interface import EngineFamily

if TYPE_CHECKING:
    from crossattn_sizing.findings.results import PropertyFailure

PROPERTY = "cross-pool capacity: admitted encoder tokens fit the pool"


def run_verify(spec: str, family: EngineFamily, args: argparse.Namespace) -> int:
    """``verify --engine SPEC``: the capacity property over the cross-pool layout, with the engine's sizer
    (its :attr:`~crossattn_sizing.engine.interface.EngineMode.SIZER` family's ``sizer``); the exit status
    (0 holds, 1 fails, 3 not run). The options it does not take (the report files, -k, --jobs, ...) were
    refused by the engine's family before this runs; bad input is still one line and exit 2, and
    everything else that stops the run is "not run" with one line."""
    from hypothesis import seed as hypothesis_seed
    from hypothesis import settings

    from crossattn_sizing.runs.profiles import register_profiles, selected_profile
    from crossattn_sizing.runs.suite import suite_module

    prop = suite_module("cross_pool_capacity").encoder_tokens_fit_the_cross_pool
    register_profiles()
    name = selected_profile(args.profile)
    profile = settings.get_profile(name)
    budget = args.max_examples if args.max_examples is not None else profile.max_examples
    if budget < 1:
        raise OptionError("--max-examples", budget, "must be >= 1")
    # No example database: the verdict is this run's (a database would replay another tree's failures).
    prop = settings(profile, max_examples=budget, database=None)(prop)
    if args.seed is not None:
        prop = hypothesis_seed(args.seed)(prop)
    sizer: _Counting | None = None
    failure: PropertyFailure | None = None
    try:
        sizer = _Counting(family.sizer(spec, args.call_timeout))
        print(f"verify --engine {spec}: {sizer.function} (docs/engine.md)")
        prop(sizer=sizer)
        outcome = Outcome.HOLDS if sizer.judged else Outcome.NOT_RUN
        reason = "" if sizer.judged else "no example was judged"
    except (HarnessError, KeyboardInterrupt, SystemExit):  # bad input: the CLI's one line, exit 2
        raise
    except BaseException as raised:  # a failure, or why nothing was judged (pytest.skip is a BaseException)
        outcome, failure, reason = _verdict(raised, name)
    if sizer is None:  # the tree's sizer could not be made: the header names the tree alone
        print(f"verify --engine {spec}")
    judged = sizer.judged if sizer is not None else 0
    print(f"{'property':<{len(PROPERTY)}}  verdict   examples")
    print(f"{PROPERTY}  {outcome.value:<8}  {judged}")
    if failure is not None:
        for line in failure.diagnosis.splitlines():
            print(f"    {line}")
        print(f"    check: {failure.reproduce}")
    elif reason:
        print(f"    {reason}")
    return exit_status([outcome])


def _verdict(raised: BaseException, profile: str) -> tuple[Outcome, PropertyFailure | None, str]:
    """What the property's run ending in ``raised`` says: its failure, or why it is "not run" (the tree's
    code could not be asked, Hypothesis drew or accepted nothing, the harness's own code stopped)."""
    from crossattn_sizing.findings.results import PropertyFailure, could_not_judge, first_failure

    exc = first_failure(raised)
    if isinstance(exc, PropertyFailure):
        return Outcome.FAILS, exc, ""
    if type(exc).__name__ == "Skipped":  # pytest.skip(): the engine's code could not be asked
        return Outcome.NOT_RUN, None, str(exc)
    if isinstance(exc, CrossPoolNotRun):  # the sizer could not be made: a file the harness cannot read
        return Outcome.NOT_RUN, None, f"not run: {exc}"
    if isinstance(exc, unittest.SkipTest):  # Hypothesis was told to run no example
        why = f"the profile {profile} generates none (verify --engine keeps no example database)"
        return Outcome.NOT_RUN, None, f"no example was drawn: {why}, and this property pins none"
    stopped = harness_stopped("cross-pool property", exc)
    return Outcome.NOT_RUN, None, could_not_judge(raised) or f"not run: {stopped}"


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
