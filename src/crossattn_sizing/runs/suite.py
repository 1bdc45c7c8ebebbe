"""Running the property suite in-process for one policy and collecting a verdict per property.

``verify`` and ``fuzz`` both drive pytest on ``properties/`` and need the same
things back: per property, whether it held, failed (with the shrunk example,
the diagnosis and the reproduce command) or did not apply. This module owns
that, so the two commands only differ in what they do with the results.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from crossattn_sizing.base import interrupts, settings
from crossattn_sizing.base.errors import HarnessError, OptionError, PolicyCallError
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.findings.results import (
    EXPLICIT,
    FINAL_REPLAY,
    NOT_RUN_MARK,
    PropertyResult,
    could_not_judge,
    property_name,
)

SUITE_MARK = "test_capacity.py"
"""A file every copy of the suite has: a folder without it is not the suite."""


def is_suite(folder: Path) -> bool:
    """Whether ``folder`` is a property suite (it carries the suite marker file)."""
    return (folder / SUITE_MARK).is_file()


def clone_suite() -> Path | None:
    """``properties/`` of the clone this package is imported from (``src/crossattn_sizing`` beside it).

    Checked first, so a checkout run with ``src`` on the path (or installed
    editable) runs its own suite, never another tree's or an installed copy.
    """
    package = Path(__file__).resolve().parents[1]
    if package.parent.name != "src":
        return None
    candidate = package.parent.parent / "properties"
    return candidate if is_suite(candidate) else None


def installed_suite() -> Path | None:
    """The suite inside the installed package (:data:`SUITE_PACKAGE`), found without importing it."""
    from crossattn_sizing.runs.pytest_plugin import SUITE_PACKAGE

    try:
        spec = importlib.util.find_spec(SUITE_PACKAGE)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return next((Path(p) for p in locations if is_suite(Path(p))), None)


def properties_dir() -> Path:
    """The property suite's folder: ``$CROSSATTN_PROPERTIES``, else the clone's ``properties/``, else the
    copy installed with the package."""
    explicit = settings.properties_dir()
    if explicit:
        if not is_suite(Path(explicit)):
            raise HarnessError(
                f"{settings.PROPERTIES}={explicit}: is not the property suite (it has no {SUITE_MARK}); "
                "name a properties/ folder, or unset it to run the installed suite"
            )
        return Path(explicit)
    found = clone_suite() or installed_suite()
    if found is None:
        raise HarnessError(
            "property suite not found: this install of crossattn-sizing lacks crossattn_sizing.properties; "
            f"reinstall it (its wheel holds the suite) or set {settings.PROPERTIES} to a properties/ folder"
        )
    return found


NO_TEST_CASES = "run no test cases"
"""Part of Hypothesis's skip message for a test left with no phase that runs examples."""


@contextlib.contextmanager
def observing(callback: Callable[[Any], None]) -> Iterator[None]:
    """Hypothesis's observations of each test case go to ``callback`` while the block runs.

    Observability also traces line coverage of every example unless told not
    to; the harness reads no coverage, and tracing would slow every example, so
    it is switched off for the block (a module attribute Hypothesis reads at
    each test; its source says patching it is supported).
    """
    from hypothesis.internal import observability

    collect = observability.OBSERVABILITY_COLLECT_COVERAGE
    observability.OBSERVABILITY_COLLECT_COVERAGE = False
    try:
        with observability.with_observability_callback(callback):
            yield
    finally:
        observability.OBSERVABILITY_COLLECT_COVERAGE = collect


class _ResultCollector:
    """A pytest plugin: reports, exceptions and observations become :class:`PropertyResult` records."""

    def __init__(self, on_progress: Callable[[int, int, str], None] | None, stop_at: float | None) -> None:
        self.stop_at = stop_at
        self.stopped_early = False
        self.session: pytest.Session | None = None
        self.results: dict[str, PropertyResult] = {}
        self.total = 0
        self.done = 0
        self.on_progress = on_progress
        self.collect_errors: list[str] = []
        self.exit_message = ""  # why pytest.exit() stopped the session (e.g. an --impl that does not load)
        self.policy_error = ""  # a user policy that raised or answered nonsense: bad input, not a failure
        self.input_error = ""  # any other HarnessError met while collecting or running
        self.hypothesis_tests: set[str] = set()
        self._examples_before: dict[str, int] = {}
        self._exceptions: dict[str, BaseException] = {}
        self._failing_case: dict[str, tuple[str, str]] = {}  # nodeid -> (shrunk example, @reproduce_failure)
        self.config: pytest.Config | None = None

    @pytest.hookimpl(wrapper=True)
    def pytest_cmdline_parse(self, pluginmanager: pytest.PytestPluginManager, args: list[str]):
        """Keep the run's config: its stash holds the usage error a start-up check raised."""
        self.config = yield
        return self.config

    def usage_error(self) -> str:
        """The message of the run's usage error, or ``""``."""
        from crossattn_sizing.runs.pytest_plugin import last_usage_error

        return last_usage_error(self.config) if self.config is not None else ""

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # After deselection (-k), so the table lists only what ran.
        self.session = session
        self.total = len(session.items)
        from hypothesis import is_hypothesis_test

        for item in session.items:
            name = property_name(item.nodeid)
            self.results.setdefault(name, PropertyResult(name)).nodeids.append(item.nodeid)
            if is_hypothesis_test(getattr(item, "obj", None)):
                self.hypothesis_tests.add(item.nodeid)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        """Listen to Hypothesis's observation of every test case this test runs."""
        name = property_name(item.nodeid)
        result = self.results.setdefault(name, PropertyResult(name))

        def note(observation: Any) -> None:
            if observation.type != "test_case":
                return
            result.observe(observation.status, observation.how_generated, observation.metadata.phase,
                           observation.features)
            failing_explicit = observation.how_generated == EXPLICIT and observation.status != "passed"
            if observation.how_generated == FINAL_REPLAY or failing_explicit:
                blob = observation.metadata.reproduction_decorator or ""
                self._failing_case[item.nodeid] = (observation.representation, blob)

        with observing(note):
            yield

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        """Keep the exception a failing phase raised: its fields are the diagnosis."""
        yield
        if call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception):
            self._exceptions.setdefault(item.nodeid, call.excinfo.value)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """pytest.exit() (a fixture refusing bad input) arrives here too; keep its message."""
        if isinstance(excinfo.value, pytest.exit.Exception):
            self.exit_message = str(excinfo.value.msg)

    def pytest_exception_interact(self, node: pytest.Item, call: pytest.CallInfo, report) -> None:
        """Bad input met inside the suite stops the run and is reported as bad input.

        A policy that cannot be called (every later test would say the same)
        or a regression file that does not load (it breaks collection) is the
        user's input, not a property failing.
        """
        exc = call.excinfo.value if call.excinfo is not None else None
        if isinstance(exc, PolicyCallError):
            self.policy_error = str(exc)
        elif isinstance(exc, HarnessError) and not isinstance(node, pytest.Item):  # collection time
            self.input_error = str(exc)
        else:
            return
        if self.session is not None:
            self.session.shouldstop = "bad input"

    def _examples_ran(self, nodeid: str, result: PropertyResult, before: int) -> bool:
        """Whether a passed test ran any example: Hypothesis observed one (explicit ones count)."""
        return nodeid not in self.hypothesis_tests or result.examples > before

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors.append(f"{report.nodeid}: {report.longreprtext[-2000:]}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = property_name(report.nodeid)
        result = self.results.setdefault(name, PropertyResult(name))
        result.duration_s += report.duration
        if report.when == "setup":
            self._examples_before[report.nodeid] = result.examples
        unjudged = could_not_judge(self._exceptions.get(report.nodeid)) if report.failed else ""
        if unjudged:
            result.unjudged = result.unjudged or unjudged
        elif report.failed and result.outcome != Outcome.FAILS:
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else (report.longreprtext.splitlines() or [""])[-1]
            example, blob = self._failing_case.get(report.nodeid, ("", ""))
            result.fail(self._exceptions.get(report.nodeid), message, example, blob)
        elif report.skipped and report.when in ("setup", "call") and result.outcome == Outcome.NOT_RUN:
            longrepr = report.longrepr
            result.reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            # Hypothesis skips a test it was given no phase to run (the replay profile on a property
            # with no pinned example): nothing ran, which is not "does not apply".
            # A skip marked "not run" (an engine's adapter gap) is not "does not apply" either.
            if NO_TEST_CASES not in result.reason and NOT_RUN_MARK not in result.reason:
                result.outcome = Outcome.NOT_APPLICABLE
        elif report.passed and report.when == "call" and result.outcome in (Outcome.NOT_RUN,
                                                                            Outcome.NOT_APPLICABLE):
            before = self._examples_before.get(report.nodeid, 0)
            if self._examples_ran(report.nodeid, result, before):
                result.outcome, result.reason = Outcome.HOLDS, ""
            elif result.outcome == Outcome.NOT_RUN:
                result.reason = "its test passed without running a single example"
        if report.when == "teardown":
            self.done += 1
            if self.on_progress:
                self.on_progress(self.done, self.total, report.nodeid)
            if interrupts.requested() and self.session is not None:
                # A Ctrl-C whose KeyboardInterrupt was swallowed (gc callback) still stops the run.
                self.session.shouldstop = "interrupted"
            elif self.stop_at is not None and time.monotonic() > self.stop_at and self.session is not None:
                # A time budget ends the run between tests; what ran is kept and reported.
                self.stopped_early = self.done < self.total
                self.session.shouldstop = "time budget spent"


class _WithoutUsageError:
    """stderr, less pytest's own "ERROR: ..." line for a start-up usage error.

    :func:`run_suite` raises that error itself, so the CLI prints it once, in
    its own one-line form; everything else (the progress bar) passes through.
    """

    def __init__(self, stream: Any, collector: _ResultCollector) -> None:
        self._stream = stream
        self._collector = collector

    def write(self, text: str) -> int:
        message = self._collector.usage_error()
        if message and message in text:
            return len(text)
        return int(self._stream.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def run_suite(
    policy_spec: str,
    *,
    impl: str = "torch",
    device: str = "cpu",
    profile: str = "ci",
    seed: int | None = None,
    select: Sequence[str] = (),
    deselect: Sequence[str] = (),
    extra_args: Sequence[str] = (),
    on_progress: Callable[[int, int, str], None] | None = None,
    stop_at: float | None = None,
    only: Sequence[str] = (),
    plugins: Sequence[object] = (),
    allow_empty: bool = False,
) -> tuple[list[PropertyResult], int]:
    """Run ``properties/`` under one policy; return per-property results and pytest's exit code.

    ``stop_at`` (a ``time.monotonic()`` value) stops the run after the test
    that passes it; pytest then reports exit code 2 (interrupted). ``only``
    runs just these node ids (as the results name them) instead of the whole
    folder; ``plugins`` join the run (``verify``'s shared run of several policies).
    ``allow_empty``: a ``-k`` that selects nothing here is not an error (a
    share of the files, when the caller judges the whole).
    """
    root = properties_dir()
    targets = [str(root.parent / nodeid) for nodeid in only] or [str(root)]
    args = [
        *targets,
        "--rootdir",
        str(root.parent),
        # The tree's pytest settings where it has them; never a -c the user did not give pointing
        # nowhere (pytest's "check your -c/--config-file option" would name a path nobody typed).
        *(["-c", str(ini)] if (ini := root.parent / "pyproject.toml").is_file() else []),
        "-p",
        "no:cacheprovider",
        "-p",
        "no:terminal",
        # The ini addopts carry terminal flags (-ra) that mean nothing without the terminal plugin.
        "-o",
        "addopts=--import-mode=importlib",
        # Capture by swapping sys.stdout/err only (restored below whatever happens), never by
        # redirecting file descriptors the caller's report is then written to.
        "--capture=sys",
        "--policy",
        policy_spec,
        "--impl",
        impl,
        "--device",
        device,
        "--hypothesis-profile",
        profile,
        *extra_args,
    ]
    if seed is not None:
        args += ["--hypothesis-seed", str(seed)]
    for expr in select:
        args += ["-k", expr]
    for nodeid in deselect:
        args += ["--deselect", nodeid]
    collector = _ResultCollector(on_progress, stop_at)
    streams = sys.stdout, sys.stderr
    try:
        with contextlib.redirect_stderr(_WithoutUsageError(sys.stderr, collector)):
            code = pytest.main(args, plugins=[collector, *plugins])
    finally:
        # A Ctrl-C that lands while pytest is starting can leave its output capture in place;
        # the caller's report must still reach the caller's streams.
        sys.stdout, sys.stderr = streams
    if collector.policy_error:
        raise PolicyCallError(collector.policy_error)
    if collector.input_error:
        raise HarnessError(collector.input_error)
    if collector.collect_errors:
        raise HarnessError("the property suite did not collect:\n" + "\n".join(collector.collect_errors))
    if collector.exit_message:
        raise HarnessError(collector.exit_message)
    if code == pytest.ExitCode.USAGE_ERROR and collector.usage_error():
        raise HarnessError(collector.usage_error())
    if code == pytest.ExitCode.NO_TESTS_COLLECTED and select and not deselect and not allow_empty:
        raise OptionError("-k", " ".join(repr(s) for s in select), "selects no property of the suite")
    # Nothing to check is never "holds"; a -k that selects nothing in one share of the files is the
    # caller's to judge over the whole (it raises the -k error above when no share ran anything).
    if code == pytest.ExitCode.NO_TESTS_COLLECTED and not deselect and not (select and allow_empty):
        raise HarnessError(f"the property suite at {root} has no test: set {settings.PROPERTIES} to the "
                           "repository's properties/ folder (or unset it)")  # fmt: skip
    if code in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR):
        raise HarnessError(
            f"pytest could not run the property suite for policy {policy_spec} (exit {int(code)})"
        )
    for result in collector.results.values():
        result.finish()
    return sorted(collector.results.values(), key=lambda r: r.name), int(code)
