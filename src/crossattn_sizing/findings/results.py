"""The outcome of a property, as values: what ``verify``, ``fuzz`` and the reports read.

Two kinds of value arrive from a run of the property suite, and neither is
read back out of printed text:

- a :class:`PropertyFailure`, raised by a property's assertion, carries its
  diagnosis and reproduce command as attributes;
- Hypothesis's observations (one per test case it ran, its documented
  observability interface) carry the status, the events, the ``target()``
  scores, the phase and, for a failure, the shrunk example and the
  ``@reproduce_failure`` decorator.

:class:`PropertyResult` folds both into one record per property. A
:class:`Finding` is what the report lists beside the verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossattn_sizing.base.errors import described
from crossattn_sizing.base.outcome import Outcome

NOT_RUN_MARK = "[not run] "
"""How a property's skip says "not run" rather than "does not apply": an engine could not run the
example (the harness's adapter reached a gap). The suite folds such a skip to ``Outcome.NOT_RUN``, so
a property whose examples were never judged never reads "n/a", and its policy never "holds"."""


class PropertyFailure(AssertionError):
    """A property's own failure: the diagnosis to print and the command that replays it.

    An ``AssertionError`` so pytest and Hypothesis treat it as any failing
    assertion; its text (what pytest prints) is the diagnosis followed by the
    reproduce line, and the suite reads the two fields directly.

    ``reruns_test``: the reproduce line reruns the test (a ``pytest`` line)
    rather than replaying this case by itself, as a property with no command
    of its own for its case does; reports then keep Hypothesis's example and
    ``@reproduce_failure`` beside it.

    ``latent``: the case is one no served request reaches (docs/spec.md §12):
    the property's verdict is ``latent``, never ``fails``.
    """

    def __init__(self, diagnosis: str, reproduce: str = "", *, reruns_test: bool = False,
                 latent: bool = False) -> None:  # fmt: skip
        self.diagnosis = diagnosis
        self.reproduce = reproduce
        self.reruns_test = reruns_test
        self.latent = latent
        text = f"{diagnosis}\n  reproduce: {reproduce}" if reproduce else diagnosis
        super().__init__(text)


def first_failure(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (Hypothesis reports several bugs as one), else ``exc``.

    Read by its ``exceptions`` attribute: on Python 3.10 the group class is the
    ``exceptiongroup`` backport, not a builtin.
    """
    while True:
        inner = getattr(exc, "exceptions", None)
        if not isinstance(inner, (tuple, list)) or not inner or not isinstance(inner[0], BaseException):
            return exc
        exc = inner[0]


def could_not_judge(exc: BaseException | None) -> str:
    """Why a test that raised ``exc`` judged nothing, or "" when ``exc`` is a failure of the property.

    Hypothesis gives up, rather than finding a counterexample, when it cannot
    generate enough examples the test accepts: a health check about filtering
    (an engine policy discarding the configs its release cannot represent) or
    an unsatisfiable search. Nothing was shown wrong, and not enough was
    checked to call it holding.
    """
    leaf = first_failure(exc) if exc is not None else None
    if leaf is None:
        return ""
    from hypothesis.errors import FailedHealthCheck, Unsatisfiable

    if isinstance(leaf, (FailedHealthCheck, Unsatisfiable)):
        first = str(leaf).strip().splitlines()[0] if str(leaf).strip() else type(leaf).__name__
        return f"Hypothesis could not generate enough accepted examples ({type(leaf).__name__}: {first})"
    return ""


def property_name(nodeid: str) -> str:
    """``properties/test_capacity.py::test_coverage[x]`` -> ``test_capacity::test_coverage``."""
    path, _, rest = nodeid.partition("::")
    return f"{Path(path).stem}::{rest.split('[')[0]}"


VIOLATION_RANK = {Outcome.FAILS: 2, Outcome.LATENT: 1}
"""Which violation a merged result keeps: a failure outranks a latent one (no served request reaches it)."""

RAN = ("passed", "failed")
"""Observation statuses of a test case that ran to the end (``gave_up`` ones were rejected)."""
FINAL_REPLAY = "minimal failing test case"
"""``how_generated`` of Hypothesis's last replay of a shrunk failure (not a new example)."""
EXPLICIT = "explicit example"
"""``how_generated`` of an ``@example`` case."""


def event_counts(features: dict[str, Any]) -> tuple[dict[str, int], dict[str, float]]:
    """A test case's ``event()`` calls (``label`` or ``label: payload``) and ``target()`` scores.

    Observability puts both in ``features``: targets under ``target:<label>``
    (``target`` for the unlabelled one), events under their label.
    """
    events: dict[str, int] = {}
    targets: dict[str, float] = {}
    for key, value in features.items():
        if key == "target" or key.startswith("target:"):
            targets[key.removeprefix("target").removeprefix(":")] = float(value)
        else:
            events[f"{key}: {value}" if value not in ("", None) else key] = 1
    return events, targets


@dataclass
class Finding:
    """A reported issue that is not a failure of the policy under test (e.g. the DCP cross path).

    The one finding type: :func:`crossattn_sizing.findings.dcp.all_findings` returns it and the
    verify report (:class:`~crossattn_sizing.runs.verify_report.VerifyReport`) prints and writes it.
    """

    title: str
    detail: str


@dataclass
class PropertyResult:
    """The outcome of one property (all its parametrizations) for one policy.

    It starts as "not run" and becomes "holds" only when a test of it passed
    having run at least one example: a deselected, interrupted or empty run
    never reads as a property that held.
    """

    name: str
    outcome: Outcome = Outcome.NOT_RUN  # holds | fails | latent | n/a | not run
    diagnosis: str = ""
    falsifying_example: str = ""  # Hypothesis's shrunk example, as it prints it
    reproduce: str = ""  # the property's own command that replays the failure, if it gave one
    reruns_test: bool = False  # ``reproduce`` reruns the test: Hypothesis's replay is still needed
    replay_decorator: str = ""  # Hypothesis's ``@reproduce_failure(...)`` for the same case
    reason: str = ""  # why not applicable, or why not run
    duration_s: float = 0.0
    nodeids: list[str] = field(default_factory=list)
    # Hypothesis's observations, summed over parametrizations (fuzz summaries read these).
    examples: int = 0
    events: dict[str, int] = field(default_factory=dict)
    best_targets: dict[str, float] = field(default_factory=dict)
    # Failures Hypothesis replayed from the example database (its reuse phase): found
    # earlier, by this machine or by another fuzzing worker sharing the database.
    replayed: int = 0
    # Why some test of it could not judge enough examples (see :func:`could_not_judge`); a
    # property with such a test reads "not run" unless another test of it failed.
    unjudged: str = ""
    # How verify shared the judging with other policies (crossattn_sizing.runs.shared_run), or "" when
    # this policy's own run judged it.
    shared: str = ""

    def __post_init__(self) -> None:
        self.outcome = Outcome(self.outcome)  # a word read back from JSON (fuzz's workers, verify's)

    def finish(self) -> None:
        """The verdict once every test of the property has reported."""
        if self.unjudged and self.outcome not in VIOLATION_RANK:
            self.outcome, self.reason = Outcome.NOT_RUN, self.unjudged

    def observe(self, status: str, how_generated: str, phase: str | None, features: dict[str, Any]) -> None:
        """Fold one test-case observation in: an example that ran, its events and target scores."""
        if how_generated == FINAL_REPLAY or status not in RAN:
            return
        events, targets = event_counts(features)
        self._count(1, events, targets)
        if status == "failed" and phase == "reuse":
            self.replayed += 1

    def fail(self, exc: BaseException | None, message: str, example: str, blob: str) -> None:
        """Record the failure: a :class:`PropertyFailure`'s fields, else the exception's own text.

        ``message`` is pytest's crash line, used when no exception object
        reached the suite (a failure in a fixture's teardown, say); ``example``
        and ``blob`` come from Hypothesis's observation of the failing case.
        """
        self.outcome = Outcome.FAILS
        leaf = first_failure(exc) if exc is not None else None
        if isinstance(leaf, PropertyFailure):
            self.diagnosis, self.reproduce = leaf.diagnosis, leaf.reproduce
            self.reruns_test = leaf.reruns_test
            if leaf.latent:  # a violation no served request reaches: judged, never a failure
                self.outcome = Outcome.LATENT
        elif leaf is not None:
            self.diagnosis = described(leaf)
        else:
            self.diagnosis = message
        self.falsifying_example, self.replay_decorator = example, blob

    def replay_lines(self) -> list[str]:
        """How to replay the failure, for reports.

        The property's own command when it gave one that replays the case
        (its diagnosis already names the case); else Hypothesis's shrunk
        example and the decorator that replays it, after the property's rerun
        line if it gave one.
        """
        if self.reproduce and not self.reruns_test:
            return [f"  reproduce: {self.reproduce}"]
        lines = [f"  reproduce: {self.reproduce}"] if self.reproduce else []
        if self.falsifying_example:
            lines.append(f"  shrunk example: {self.falsifying_example}")
        if self.replay_decorator:
            lines.append(f"  replay it with: {self.replay_decorator}")
        return lines

    def merge(self, other: PropertyResult) -> None:
        """Fold another run of the same property in (fuzz rounds add up this way)."""
        self.nodeids = sorted(set(self.nodeids) | set(other.nodeids))
        self._count(other.examples, other.events, other.best_targets)
        self.replayed += other.replayed
        if VIOLATION_RANK.get(other.outcome, 0) > VIOLATION_RANK.get(self.outcome, 0):
            self.outcome, self.diagnosis, self.reproduce = other.outcome, other.diagnosis, other.reproduce
            self.reruns_test = other.reruns_test
            self.falsifying_example, self.replay_decorator = other.falsifying_example, other.replay_decorator
        elif other.outcome == Outcome.HOLDS and self.outcome in (Outcome.NOT_RUN, Outcome.NOT_APPLICABLE):
            self.outcome = Outcome.HOLDS
        elif other.outcome == Outcome.NOT_APPLICABLE and self.outcome == Outcome.NOT_RUN:
            self.outcome, self.reason = Outcome.NOT_APPLICABLE, other.reason

    def _count(self, examples: int, events: dict[str, int], targets: dict[str, float]) -> None:
        """The one place counts add up: examples and events sum, target scores keep their best."""
        self.examples += examples
        for event, n in events.items():
            self.events[event] = self.events.get(event, 0) + n
        for label, score in targets.items():
            self.best_targets[label] = max(score, self.best_targets.get(label, float("-inf")))
