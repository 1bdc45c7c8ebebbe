"""Running the property suite in-process for one policy and collecting a verdict per property.

``verify`` and ``fuzz`` both drive pytest on ``properties/`` and need the same
things back: per property, whether it held, failed (with the shrunk example,
the diagnosis and the reproduce command) or did not apply. This module owns
that, so the two commands only differ in what they do with the results.
"""

from __future__ import annotations

import os
import re
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


def property_name(nodeid: str) -> str:
    """``properties/test_capacity.py::test_coverage[x]`` -> ``test_capacity::test_coverage``."""
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).stem}::{rest.split('[')[0]}"


_REPRODUCE = re.compile(r"reproduce:\s*(.+)")


def _failure_details(report: pytest.TestReport) -> tuple[str, str, str]:
    """Diagnosis, falsifying example and reproduce line out of a failed report."""
    text = report.longreprtext
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else text.splitlines()[-1:][0] if text else ""
    diagnosis = message.split("\n(note:")[0]
    example = ""
    match = re.search(r"(?:Falsifying|Failing) (?:explicit )?example: (.+?)(?:\n\n|\Z)", text, re.S)
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

    def __init__(self, on_progress: Callable[[int, int, str], None] | None) -> None:
        self.results: dict[str, PropertyResult] = {}
        self.total = 0
        self.done = 0
        self.on_progress = on_progress
        self.collect_errors: list[str] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # After deselection (-k), so the table lists only what ran.
        self.total = len(session.items)
        for item in session.items:
            name = property_name(item.nodeid)
            self.results.setdefault(name, PropertyResult(name)).nodeids.append(item.nodeid)

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


def run_suite(
    policy_spec: str,
    *,
    impl: str = "torch",
    device: str = "cpu",
    profile: str = "ci",
    seed: int | None = None,
    select: Sequence[str] = (),
    extra_args: Sequence[str] = (),
    on_progress: Callable[[int, int, str], None] | None = None,
) -> tuple[list[PropertyResult], int]:
    """Run ``properties/`` under one policy; return per-property results and pytest's exit code."""
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
    collector = _Collector(on_progress)
    code = pytest.main(args, plugins=[collector])
    if collector.collect_errors:
        raise HarnessError("the property suite did not collect:\n" + "\n".join(collector.collect_errors))
    if code in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR):
        raise HarnessError(
            f"pytest could not run the property suite for policy {policy_spec} (exit {int(code)})"
        )
    return sorted(collector.results.values(), key=lambda r: r.name), int(code)
