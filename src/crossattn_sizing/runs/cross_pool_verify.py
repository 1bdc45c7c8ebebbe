"""The cross-pool property, run with an engine's sizer: its verdict as verify's record of a property.

The property is the suite's (:mod:`properties.cross_pool_capacity`); it takes
the engine's sizer, not a sizing policy, so it is not a ``test_`` module the
suite run collects: it is called here with the sizer (an
:meth:`~crossattn_sizing.engine.interface.EngineFamily.sizer` of a
:attr:`~crossattn_sizing.engine.interface.EngineMode.SIZER` family), under
the profile, example budget and seed verify was given, without an example
database (the verdict is this run's). What comes back is the same
:class:`~crossattn_sizing.findings.results.PropertyResult` the suite runner
gives for every other property (verdict, diagnosis, the ``check`` line that
replays the shrunk case, examples judged), so ``verify``'s table, ``--json``,
``--junit-xml`` and ``--markdown`` and ``report`` read it as they read any
engine's (:func:`crossattn_sizing.runs.engine_verify.engine_verify` folds it
into a :class:`~crossattn_sizing.runs.verify_report.VerifyReport`).

"holds" only when examples were judged and held; a case the engine's code
could not be asked about makes the property "not run" with the reason.
"""

from __future__ import annotations

import time
import unittest
from typing import Any

from crossattn_sizing.base.errors import HarnessError, OptionError
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.core.cross_pool import CrossPoolCase, CrossPoolNotRun, harness_stopped
from crossattn_sizing.engine.interface import EngineFamily
from crossattn_sizing.findings.results import PropertyResult

FUNCTION = "encoder_tokens_fit_the_cross_pool"
PROPERTY = f"cross_pool_capacity::{FUNCTION}"
"""The property's name as the reports name every property (``module::function``)."""


def sizer_result(
    spec: str, family: EngineFamily, *, profile: str, max_examples: int | None, seed: int | None,
    call_timeout: float | None,
) -> PropertyResult:  # fmt: skip
    """Run the capacity property with the sizer of ``family`` (an
    :attr:`~crossattn_sizing.engine.interface.EngineMode.SIZER` family) for ``spec``, given
    ``call_timeout``; its result.

    Bad input (an example budget below 1, a tree refused) is one line and exit 2, raised; Ctrl-C is
    raised too, for the caller to mark the run interrupted. Everything else that stops the run is
    "not run" with one line.
    """
    from hypothesis import given, settings
    from hypothesis import seed as hypothesis_seed

    from crossattn_sizing.runs.profiles import register_profiles, selected_profile
    from crossattn_sizing.runs.suite import suite_module

    # A fresh @given test each run: settings and seed are attributes Hypothesis sets on the test object,
    # so decorating the module's own twice (report runs it again on --fix's copy) would be refused.
    handle = suite_module("cross_pool_capacity").encoder_tokens_fit_the_cross_pool.hypothesis
    prop = given(**handle._given_kwargs)(handle.inner_test)
    register_profiles()
    name = selected_profile(profile)
    chosen = settings.get_profile(name)
    budget = max_examples if max_examples is not None else chosen.max_examples
    if budget < 1:
        raise OptionError("--max-examples", budget, "must be >= 1")
    # No example database: the verdict is this run's (a database would replay another tree's failures).
    prop = settings(chosen, max_examples=budget, database=None)(prop)
    if seed is not None:
        prop = hypothesis_seed(seed)(prop)
    result = PropertyResult(PROPERTY, nodeids=[f"properties/cross_pool_capacity.py::{FUNCTION}"])
    sizer: _Counting | None = None
    start = time.monotonic()
    try:
        sizer = _Counting(family.sizer(spec, call_timeout))
        prop(sizer=sizer)
        result.outcome = Outcome.HOLDS if sizer.judged else Outcome.NOT_RUN
        result.reason = "" if sizer.judged else "no example was judged"
    except (HarnessError, KeyboardInterrupt, SystemExit):  # bad input: the CLI's one line, exit 2
        raise
    except BaseException as raised:  # a failure, or why nothing was judged (pytest.skip is a BaseException)
        _record(result, raised, name)
    finally:
        result.duration_s = time.monotonic() - start
        result.examples = sizer.judged if sizer is not None else 0
    return result


def _record(result: PropertyResult, raised: BaseException, profile: str) -> None:
    """What the property's run ending in ``raised`` says: its failure, or why it is "not run" (the tree's
    code could not be asked, Hypothesis drew or accepted nothing, the harness's own code stopped)."""
    from crossattn_sizing.findings.results import PropertyFailure, could_not_judge, first_failure

    exc = first_failure(raised)
    if isinstance(exc, PropertyFailure):
        result.fail(exc, str(exc), "", "")
        return
    result.outcome = Outcome.NOT_RUN  # the reports say "not run: REASON"
    if type(exc).__name__ == "Skipped":  # pytest.skip(): the engine's code could not be asked
        result.reason = str(exc).removeprefix("not run: ")
    elif isinstance(exc, CrossPoolNotRun):  # the sizer could not be made: a file the harness cannot read
        result.reason = str(exc)
    elif isinstance(exc, unittest.SkipTest):  # Hypothesis was told to run no example
        why = f"the profile {profile} generates none (verify --engine keeps no example database)"
        result.reason = f"no example was drawn: {why}, and this property pins none"
    else:
        result.reason = could_not_judge(raised) or harness_stopped("cross-pool property", exc)


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
