"""``verify --engine SPEC`` for an engine that answers in its own worker: one verdict row, the same report.

The engine family says what its verify runs (an
:class:`~crossattn_sizing.engine.interface.EngineSuite`: property files, the
plugin options that point them at the release, the properties the release is
known to fail). They run through the suite runner verify uses for policies
(:func:`crossattn_sizing.runs.suite.run_suite`), so a verdict means what it
means there: "holds" only when the property ran examples and held, a failure
comes with its shrunk case and the line that replays it. The result is a
:class:`~crossattn_sizing.runs.verify_report.VerifyReport` with one row named
by the spec, so the table, ``--json``, ``--junit-xml`` and ``--markdown`` are
written by the same code as a policy's (:mod:`crossattn_sizing.runs.outputs`).
A suite whose property takes the engine's own sizer (TensorRT-LLM's cross
pool: a family of mode :attr:`EngineMode.SIZER`) is run by
:func:`crossattn_sizing.runs.cross_pool_verify.sizer_result` instead of the
suite runner; its result is the same record, so the report is the same too.
An engine whose release is itself a sizing policy (vLLM) never comes here: its
verify is the policy's, with ``--policy`` and ``--impl`` set to the spec.
"""

from __future__ import annotations

import contextlib
import io

from crossattn_sizing.base import interrupts
from crossattn_sizing.base.errors import OptionError
from crossattn_sizing.engine.interface import EngineFamily, EngineMode, EngineSuite
from crossattn_sizing.findings.results import PropertyResult
from crossattn_sizing.runs.cross_pool_verify import sizer_result
from crossattn_sizing.runs.profiles import database_folder, with_max_examples
from crossattn_sizing.runs.suite import run_suite
from crossattn_sizing.runs.verify_report import PolicyVerdict, VerifyReport

DEVICE = "cpu"
"""Where an engine's own worker runs its code (the report's device column)."""


def engine_verify(
    spec: str, suite: EngineSuite, *, profile: str, max_examples: int | None, seed: int | None,
    select: list[str], notes: list[str], family: EngineFamily, call_timeout: float | None = None,
    startup: bool = True,
) -> VerifyReport:  # fmt: skip
    """Run ``suite`` on ``spec``; its report (one row, ``spec``; the implementation column says so too).

    ``suite`` is ``family``'s (:meth:`EngineFamily.verify_suite`); a family of mode
    :attr:`EngineMode.SIZER` runs its one property with its sizer instead of the suite runner.
    Everything is expected to hold but :attr:`EngineSuite.known_failures`. A
    property with no example run is "not run", as for a policy. ``call_timeout``
    bounds each call into a sizer suite's worker (a suite run through pytest
    has it in its plugin options). ``startup``: run the suite's start-up files too
    (:attr:`EngineSuite.startup_files`; ``report`` does not).
    """
    sizing = family.mode is EngineMode.SIZER
    if sizing and select:
        raise OptionError("-k", " ".join(select), f"does not apply with --engine {spec}: its suite is one "
                          "property, the cross-pool capacity")  # fmt: skip
    files = [*suite.files, *(suite.startup_files if startup else ())]
    if startup and suite.startup_files:
        notes = [*notes, f"start-up batches: {', '.join(suite.startup_files)} (docs/engine.md)"]
    if startup and suite.startup_not_run:  # a documented absence, said; the exit status is the properties'
        notes = [*notes, f"start-up batches not run: {suite.startup_not_run}"]
    interrupted = True
    results: list[PropertyResult] = []
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the report says it all once
            if sizing:
                results = [sizer_result(spec, family, profile=profile, max_examples=max_examples, seed=seed,
                                        call_timeout=call_timeout)]  # fmt: skip
                code = 0
            else:
                results, code = run_suite(
                    "mrv2", profile=with_max_examples(profile, max_examples), seed=seed, select=select,
                    only=files, extra_args=list(suite.pytest_args),
                )  # fmt: skip
        interrupted = code == 2 or interrupts.requested()
    except KeyboardInterrupt:  # outside pytest: before or after the suite (or in the sizer's property)
        pass
    verdict = PolicyVerdict(spec, True, results, interrupted=interrupted,
                            known_failures=tuple(sorted(suite.known_failures)))  # fmt: skip
    # The report names the database its profile used, as verify's does; a sizer's property keeps none.
    folder = None if sizing else database_folder(profile)
    return VerifyReport(profile, spec, DEVICE, seed, [verdict], [], interrupted,
                        notes=[n for n in (suite.heading, *notes) if n],
                        database=None if folder is None else str(folder))  # fmt: skip
