"""Running the property suite in-process for one policy and collecting a verdict per property.

``verify`` and ``fuzz`` both drive pytest on ``properties/`` and need the same
things back: per property, whether it held, failed (with the shrunk example,
the diagnosis and the reproduce command) or did not apply. This module owns
that, so the two commands only differ in what they do with the results.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from crossattn_sizing import interrupts
from crossattn_sizing.errors import HarnessError, OptionError, PolicyCallError

PROPERTIES_ENV = "CROSSATTN_PROPERTIES"


def properties_dir() -> Path:
    """The property suite's folder: ``$CROSSATTN_PROPERTIES``, else the clone this package is in."""
    explicit = os.environ.get(PROPERTIES_ENV)
    candidate = Path(explicit) if explicit else Path(__file__).resolve().parents[2] / "properties"
    if not (candidate / "test_capacity.py").is_file():
        raise HarnessError(
            f"property suite not found at {candidate}: install from a clone of the repository "
            f"(pip install -e .) or set {PROPERTIES_ENV} to its properties/ folder"
        )
    return candidate


@dataclass
class PropertyResult:
    """The outcome of one property (all its parametrizations) for one policy.

    It starts as "not run" and becomes "holds" only when a test of it passed
    having run at least one example: a deselected, interrupted or empty run
    never reads as a property that held.
    """

    name: str
    outcome: str = "not run"  # holds | fails | n/a | not run
    diagnosis: str = ""
    falsifying_example: str = ""
    reproduce: str = ""
    reason: str = ""  # why not applicable
    duration_s: float = 0.0
    nodeids: list[str] = field(default_factory=list)
    # Hypothesis statistics, summed over parametrizations (fuzz summaries read these).
    examples: int = 0
    events: dict[str, int] = field(default_factory=dict)
    best_targets: dict[str, float] = field(default_factory=dict)
    # Failures Hypothesis replayed from the example database (its reuse phase): found
    # earlier, by this machine or by another fuzzing worker sharing the database.
    replayed: int = 0

    def add_statistics(self, stats: dict) -> None:  # type: ignore[type-arg]
        """Fold one Hypothesis statistics dict in (its format is Hypothesis's, read defensively)."""
        for key, phase in stats.items():
            if not key.endswith("-phase") or not isinstance(phase, dict):
                continue
            for case in phase.get("test-cases", []):
                self._count(1, dict.fromkeys(case.get("events", []), 1), {})
            if key == "reuse-phase":
                self.replayed += int(phase.get("distinct-failures", 0))
        self._count(0, {}, stats.get("targets") or {})

    def merge(self, other: PropertyResult) -> None:
        """Fold another run of the same property in (fuzz rounds add up this way)."""
        self.nodeids = sorted(set(self.nodeids) | set(other.nodeids))
        self._count(other.examples, other.events, other.best_targets)
        self.replayed += other.replayed
        if other.outcome == "fails" and self.outcome != "fails":
            self.outcome, self.diagnosis, self.reproduce = "fails", other.diagnosis, other.reproduce
        elif other.outcome == "holds" and self.outcome in ("not run", "n/a"):
            self.outcome = "holds"
        elif other.outcome == "n/a" and self.outcome == "not run":
            self.outcome, self.reason = "n/a", other.reason

    def _count(self, examples: int, events: dict[str, int], targets: dict[str, float]) -> None:
        """The one place counts add up: examples and events sum, target scores keep their best."""
        self.examples += examples
        for event, n in events.items():
            self.events[event] = self.events.get(event, 0) + n
        for label, score in targets.items():
            self.best_targets[label] = max(score, self.best_targets.get(label, float("-inf")))


def property_name(nodeid: str) -> str:
    """``properties/test_capacity.py::test_coverage[x]`` -> ``test_capacity::test_coverage``."""
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).stem}::{rest.split('[')[0]}"


NO_TEST_CASES = "run no test cases"
"""Part of Hypothesis's skip message for a test left with no phase that runs examples."""

_REPRODUCE = re.compile(r"reproduce:\s*(.+)")


def _failure_details(report: pytest.TestReport) -> tuple[str, str, str]:
    """Diagnosis, falsifying example and reproduce line out of a failed report.

    Hypothesis attaches the falsifying example and the reproduce blob to the
    exception as notes, so they arrive inside the crash message; they are split
    off here so the diagnosis reads as the assertion wrote it.
    """
    text = report.longreprtext
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else (text.splitlines() or [""])[-1]
    split = re.search(r"\n(?:Falsifying|Failing) (?:explicit )?(?:example|test case): ", message)
    diagnosis = message[: split.start()] if split else message
    diagnosis = diagnosis.split("\n(note:")[0].strip()
    example = ""
    pattern = r"(?:Falsifying|Failing) (?:explicit )?(?:example|test case): (.+?)(?:\n\n|\Z)"
    match = re.search(pattern, text, re.S)
    if match:
        example = match.group(1).strip()
    blob = re.search(r"(@reproduce_failure\([^)]*\))", text)
    repro = _REPRODUCE.search(diagnosis)
    reproduce = repro.group(1).strip() if repro else ""
    if blob and not reproduce:
        reproduce = blob.group(1)
    return diagnosis, example, reproduce


class _Collector:
    """A pytest plugin that turns reports into :class:`PropertyResult` records."""

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
        self._items: dict[str, pytest.Item] = {}
        self._examples_before: dict[str, int] = {}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # After deselection (-k), so the table lists only what ran.
        self.session = session
        self.total = len(session.items)
        from hypothesis import is_hypothesis_test

        for item in session.items:
            name = property_name(item.nodeid)
            self.results.setdefault(name, PropertyResult(name)).nodeids.append(item.nodeid)
            self._items[item.nodeid] = item
            if is_hypothesis_test(getattr(item, "obj", None)):
                self.hypothesis_tests.add(item.nodeid)

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_call(self, item: pytest.Item):  # type: ignore[no-untyped-def]
        """Listen to Hypothesis's statistics for this test, then pass them on to its own plugin.

        ``trylast`` makes this the innermost wrapper, so our callback is the one
        Hypothesis sees; it forwards to whatever was installed before.
        """
        from hypothesis.statistics import collector

        previous = collector.value
        name = property_name(item.nodeid)

        def note(stats: dict) -> None:  # type: ignore[type-arg]
            self.results.setdefault(name, PropertyResult(name)).add_statistics(stats)
            if previous is not None:
                previous(stats)

        with collector.with_value(note):
            yield

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """pytest.exit() (a fixture refusing bad input) arrives here too; keep its message."""
        if isinstance(excinfo.value, pytest.exit.Exception):
            self.exit_message = str(excinfo.value.msg)

    def pytest_exception_interact(self, node: pytest.Item, call: pytest.CallInfo, report) -> None:  # type: ignore[no-untyped-def, type-arg]
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
        """Whether a passed test ran any example (a plain test always does)."""
        if nodeid not in self.hypothesis_tests:
            return True
        if result.examples > before:
            return True
        from hypothesis import Phase, settings

        obj = getattr(self._items.get(nodeid), "obj", None)
        explicit = getattr(obj, "hypothesis_explicit_examples", ())
        return bool(explicit) and Phase.explicit in settings.default.phases

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors.append(f"{report.nodeid}: {report.longreprtext[-2000:]}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = property_name(report.nodeid)
        result = self.results.setdefault(name, PropertyResult(name))
        result.duration_s += report.duration
        if report.when == "setup":
            self._examples_before[report.nodeid] = result.examples
        if report.failed and result.outcome != "fails":
            result.outcome = "fails"
            result.diagnosis, result.falsifying_example, result.reproduce = _failure_details(report)
        elif report.skipped and report.when in ("setup", "call") and result.outcome == "not run":
            longrepr = report.longrepr
            result.reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            # Hypothesis skips a test it was given no phase to run (the replay profile on a property
            # with no pinned example): nothing ran, which is not "does not apply".
            if NO_TEST_CASES not in result.reason:
                result.outcome = "n/a"
        elif report.passed and report.when == "call" and result.outcome in ("not run", "n/a"):
            before = self._examples_before.get(report.nodeid, 0)
            if self._examples_ran(report.nodeid, result, before):
                result.outcome, result.reason = "holds", ""
            elif result.outcome == "not run":
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

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        from crossattn_sizing import pytest_plugin

        message = pytest_plugin.last_usage_error
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
) -> tuple[list[PropertyResult], int]:
    """Run ``properties/`` under one policy; return per-property results and pytest's exit code.

    ``stop_at`` (a ``time.monotonic()`` value) stops the run after the test
    that passes it; pytest then reports exit code 2 (interrupted).
    """
    root = properties_dir()
    args = [
        str(root),
        "--rootdir",
        str(root.parent),
        "-c",
        str(root.parent / "pyproject.toml"),
        "-p",
        "no:cacheprovider",
        "-p",
        "no:terminal",
        # The ini addopts carry terminal flags (-ra) that mean nothing without the terminal plugin.
        "-o",
        "addopts=--import-mode=importlib",
        "--sizing-policy",
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
    from crossattn_sizing import pytest_plugin

    pytest_plugin.last_usage_error = ""
    collector = _Collector(on_progress, stop_at)
    with contextlib.redirect_stderr(_WithoutUsageError(sys.stderr)):
        code = pytest.main(args, plugins=[collector])
    if collector.policy_error:
        raise PolicyCallError(collector.policy_error)
    if collector.input_error:
        raise HarnessError(collector.input_error)
    if collector.collect_errors:
        raise HarnessError("the property suite did not collect:\n" + "\n".join(collector.collect_errors))
    if collector.exit_message:
        raise HarnessError(collector.exit_message)
    if code == pytest.ExitCode.USAGE_ERROR and pytest_plugin.last_usage_error:
        raise HarnessError(pytest_plugin.last_usage_error)
    if code == pytest.ExitCode.NO_TESTS_COLLECTED and select and not deselect:
        raise OptionError("-k", " ".join(repr(s) for s in select), "selects no property of the suite")
    if code in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR):
        raise HarnessError(
            f"pytest could not run the property suite for policy {policy_spec} (exit {int(code)})"
        )
    return sorted(collector.results.values(), key=lambda r: r.name), int(code)
