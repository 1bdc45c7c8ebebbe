"""Running the property suite in-process for one policy and collecting a verdict per property.

``verify`` and ``fuzz`` both drive pytest on ``properties/`` and need the same
things back: per property, whether it held, failed (with the shrunk example,
the diagnosis and the reproduce command) or did not apply. This module owns
that, so the two commands only differ in what they do with the results.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from crossattn_sizing.errors import HarnessError

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
    """The outcome of one property (all its parametrizations) for one policy."""

    name: str
    outcome: str = "holds"  # holds | fails | n/a
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

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # After deselection (-k), so the table lists only what ran.
        self.session = session
        self.total = len(session.items)
        for item in session.items:
            name = property_name(item.nodeid)
            self.results.setdefault(name, PropertyResult(name)).nodeids.append(item.nodeid)

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

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors.append(f"{report.nodeid}: {report.longreprtext[-2000:]}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = property_name(report.nodeid)
        result = self.results.setdefault(name, PropertyResult(name))
        result.duration_s += report.duration
        if report.failed and result.outcome != "fails":
            result.outcome = "fails"
            result.diagnosis, result.falsifying_example, result.reproduce = _failure_details(report)
        elif report.skipped and report.when in ("setup", "call") and result.outcome == "holds":
            result.outcome = "n/a"
            longrepr = report.longrepr
            result.reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        if report.when == "teardown":
            self.done += 1
            if self.on_progress:
                self.on_progress(self.done, self.total, report.nodeid)
            if self.stop_at is not None and time.monotonic() > self.stop_at and self.session is not None:
                # A time budget ends the run between tests; what ran is kept and reported.
                self.stopped_early = self.done < self.total
                self.session.shouldstop = "time budget spent"


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
    collector = _Collector(on_progress, stop_at)
    code = pytest.main(args, plugins=[collector])
    if collector.collect_errors:
        raise HarnessError("the property suite did not collect:\n" + "\n".join(collector.collect_errors))
    if code in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR):
        raise HarnessError(
            f"pytest could not run the property suite for policy {policy_spec} (exit {int(code)})"
        )
    return sorted(collector.results.values(), key=lambda r: r.name), int(code)
