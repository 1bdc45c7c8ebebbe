"""One run of the property suite that judges several sizing policies, examples drawn once.

``verify`` used to run the whole suite once per policy. Every property reads
the policy only through its answers (``checked_widths(policy, config)``) and
its name in failure messages, so most of that work was repeated:

- A test that does not request the ``sizing_policy`` fixture (slot mapping,
  admission, the DCP finding's own test) never reads the policy: it runs once
  and its verdict is every policy's (:data:`POLICY_FREE`).
- A test that does request it runs each example's body once per policy, with
  the draws of ``st.data()`` recorded on the first turn and replayed on the
  others. Before a turn runs, the policy is asked the calls the earlier turns
  made; when its answers equal one turn's, the body would compute exactly what
  that turn computed, and its outcome is reused (:data:`SAME_ANSWERS`). A
  failing turn is never reused: its diagnosis and replay line name the policy
  whose body ran, so another policy with the same answers runs the body
  itself, and its failure names it (``--policy`` that policy). A body that
  does run for another policy still reads what the judge computed from the
  example's contents alone (the oracle's expected output) from the first
  body (:mod:`crossattn_sizing.runs.example_memo`, open while one example is
  judged).

Why the verdicts are the same as separate runs: under a profile with a fixed
seed and no example database (``ci``), Hypothesis's choice of the next example
depends only on the test function and on what earlier examples did. While a
policy passes every example, the shared run hands Hypothesis the same
outcomes its own run would, so it sees the same examples. A policy that fails
an example, or whose own run would have gone another way (it rejected an
example the others accepted, or drew differently), leaves the shared run, and
:func:`crossattn_sizing.runs.suite.run_suite` runs that property again for it
alone: its verdict, shrunk example and diagnosis are those of its own run.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, cast

import pytest

from crossattn_sizing.base.errors import PolicyCallError, described
from crossattn_sizing.core.policies import Policy, policy_name
from crossattn_sizing.findings.results import PropertyResult, property_name
from crossattn_sizing.runs.example_memo import one_example

POLICY_FREE = "judged once for every policy: it does not read the sizing policy"
SAME_ANSWERS = (
    "examples drawn once for every policy; a policy whose widths equal another's on an example "
    "shares that example's outcome"
)

LEFT_SHARED_RUN = (
    "a policy that failed it ran it again alone and shows that run's result, except a built-in "
    "expected to fail on a generated example: that example is shown as met, not shrunk"
)
NOT_SHRUNK = (
    "first failing example of the shared run, not shrunk (this policy is expected to fail); "
    "its own run shrinks it: crossattn-sizing verify --policy {spec} -k {test}; the example: {example}"
)

PASS, REJECT, FAIL, DIVERGED = "pass", "reject", "fail", "diverged"


class _Diverged(Exception):
    """A turn asked for a draw the recorded turns did not make: its own run would draw differently."""


class RecordingPolicy:
    """A policy that remembers every call it answered, so another policy can be asked the same."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self.calls: list[tuple[Any, Any]] = []

    @property
    def name(self) -> str:
        """The wrapped policy's name."""
        return policy_name(self._policy)

    def __call__(self, config: Any) -> Any:
        """The policy's answer, recorded with its config for the other tests to replay."""
        answer = self._policy(config)
        self.calls.append((config, answer))
        return answer

    def __getattr__(self, attr: str) -> Any:  # expected_to_hold, widths_many, ...
        return getattr(self._policy, attr)


def answers_equal(policy: Policy, calls: Sequence[tuple[Any, Any]]) -> bool:
    """Whether ``policy`` answers every recorded call as recorded (raising counts as a different answer)."""
    for config, answer in calls:
        try:
            mine = policy(config)
            if tuple(mine) != tuple(answer):
                return False
        except Exception:  # the policy's own turn will meet the same and report it its own way
            return False
    return True


class ReplayData:
    """``st.data()`` for one policy's turn: recorded draws are replayed, later ones drawn and recorded.

    A turn drawing under another label than the recording is a turn whose own
    run draws differently: it diverges.
    """

    def __init__(self, real: Any, tape: list[tuple[Any, Any]]) -> None:
        self._real = real
        self._tape = tape
        self.used = 0

    def draw(self, strategy: Any, label: Any = None) -> Any:
        """The next recorded draw (its label must match), or a real draw recorded past the tape's end."""
        if self.used < len(self._tape):
            recorded, value = self._tape[self.used]
            if recorded != label:
                raise _Diverged(f"draw {self.used + 1} is labelled {label!r}, recorded {recorded!r}")
        else:
            value = self._real.draw(strategy, label=label)
            self._tape.append((label, value))
        self.used += 1
        return value

    def __repr__(self) -> str:
        return repr(self._real)


class SharedPolicies:
    """A pytest plugin: every test that reads ``sizing_policy`` judges all ``policies`` in one run.

    After the run, :attr:`own_run` names, per test, the policies that left the
    shared run and why; :attr:`policy_free` the tests that never read a policy.
    """

    def __init__(self, specs: Sequence[str], policies: Sequence[Policy]) -> None:
        self.specs = list(specs)
        self.policies = list(policies)
        self.own_run: dict[str, dict[str, str]] = {}
        # nodeid -> spec -> its first failing generated example, as a failing result (NOT_SHRUNK)
        self.failures: dict[str, dict[str, PropertyResult]] = {}
        self.policy_free: set[str] = set()
        self.turns = 0  # policy-examples judged
        self.bodies = 0  # of which ran the test body (the rest shared an equal-answer turn)
        self._current = ""
        self._given: dict[str, set[str]] = {}
        self._restore: list[Callable[[], None]] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Note the tests that never read the policy and wrap those that do."""
        from hypothesis import is_hypothesis_test

        for item in session.items:
            if "sizing_policy" not in getattr(item, "fixturenames", ()):
                self.policy_free.add(item.nodeid)
                continue
            self.own_run.setdefault(item.nodeid, {})
            function = cast("pytest.Function", item)  # a test function: it asks for sizing_policy
            if is_hypothesis_test(function.obj):
                handle = function.obj.hypothesis
                self._given[item.nodeid] = set(getattr(handle, "_given_kwargs", {}) or {})
                original = handle.inner_test
                if not getattr(original, "_shared_policies", False):
                    handle.inner_test = self._shared(original)
                    self._restore.append(functools.partial(setattr, handle, "inner_test", original))
            else:
                function.obj = self._shared(function.obj)  # per item; pytest rebuilds it next session

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        """Remember which test runs, so a policy call is recorded under it."""
        self._current = item.nodeid
        try:
            yield
        finally:
            self._current = ""

    def pytest_sessionfinish(self) -> None:
        """Put the tests' own functions back for the next session."""
        self.restore()

    def restore(self) -> None:
        """Put the tests' own bodies back (their modules outlive this session in the process)."""
        while self._restore:
            self._restore.pop()()

    def _shared(self, body: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(body)
        def run_example(*args: Any, **kwargs: Any) -> None:
            # What the judge computes from the example's contents alone (the oracle's expected output) is
            # computed by the example's first body and read by the others; dropped once it is judged.
            with one_example():
                self._judge(body, args, kwargs)

        run_example._shared_policies = True  # type: ignore[attr-defined]
        return run_example

    def _judge(self, body: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """One example for every policy still in the shared run; Hypothesis sees the outcome they share."""
        from hypothesis import reject
        from hypothesis.errors import UnsatisfiedAssumption
        from hypothesis.strategies import DataObject

        left = self.own_run.setdefault(self._current, {})
        alive = [i for i, spec in enumerate(self.specs) if spec not in left]
        tapes: dict[str, list[tuple[Any, Any]]] = {
            name: [] for name, value in kwargs.items() if isinstance(value, DataObject)
        }
        turns: list[tuple[list[tuple[Any, Any]], str, dict[str, int]]] = []
        outcome: dict[int, tuple[str, dict[str, int]]] = {}
        for i in alive:
            self.turns += 1
            # A passing (or rejecting) turn is shared; a failing one is not: its diagnosis and replay line
            # name the policy whose body ran, so this policy runs the body itself and fails in its own words.
            shared = next((t for t in turns if t[1] != FAIL and answers_equal(self.policies[i], t[0])), None)
            if shared is not None:
                outcome[i] = (shared[1], shared[2])
                continue
            self.bodies += 1
            recording = RecordingPolicy(self.policies[i])
            replays = {name: ReplayData(kwargs[name], tape) for name, tape in tapes.items()}
            mine = {**kwargs, **replays, "sizing_policy": recording}
            if "sizing_policy_spec" in mine:
                mine["sizing_policy_spec"] = self.specs[i]
            mine = {k: v for k, v in mine.items() if k in kwargs}
            try:
                body(*args, **mine)
                result = PASS
            except UnsatisfiedAssumption:
                result = REJECT
            except _Diverged:
                result = DIVERGED
            except PolicyCallError:  # bad input: the run stops, as the policy's own run would
                raise
            except (Exception, SystemExit, GeneratorExit) as exc:  # what Hypothesis counts as failing
                result = FAIL
                failure = (exc, self._example(kwargs, tapes))
            used = {name: r.used for name, r in replays.items()}
            turns.append((recording.calls, result, used))
            outcome[i] = (result, used)
            if result == FAIL:
                self._failed(self.specs[i], failure)
        shown = self._settle(left, outcome, {name: len(t) for name, t in tapes.items()})
        if shown == REJECT and any(self.specs[i] not in left for i in alive):
            reject()  # every policy still in the shared run rejected this example

    def _failed(self, spec: str, failure: tuple[BaseException, str]) -> None:
        """Keep a policy's first failing example of a test, if Hypothesis generated it.

        A failing explicit example (``@example``, or a test without Hypothesis)
        is not kept: Hypothesis reports the simplest of several failing
        explicit examples, and the policy's own run finds it at once, with no
        shrinking to pay for. Explicit examples are the ones run as final here
        (the shared run never raises, so Hypothesis never replays a failure).
        """
        from hypothesis.control import current_build_context
        from hypothesis.errors import InvalidArgument

        try:
            explicit = current_build_context().is_final
        except InvalidArgument:  # not inside a Hypothesis test
            explicit = True
        if explicit or spec in self.failures.get(self._current, {}):
            return
        exc, example = failure
        name = property_name(self._current)
        result = PropertyResult(name, nodeids=[self._current], shared=SAME_ANSWERS)
        result.fail(exc, described(exc), "", "")
        result.reason = NOT_SHRUNK.format(spec=spec, test=name.split("::")[-1], example=example)
        self.failures.setdefault(self._current, {})[spec] = result

    def _example(self, kwargs: dict[str, Any], tapes: dict[str, list[tuple[Any, Any]]]) -> str:
        """The example as drawn: the ``@given`` arguments and every ``st.data()`` draw, by label."""
        given = self._given.get(self._current, set())
        parts = [f"{k}={v!r}" for k, v in kwargs.items() if k in given and k not in tapes]
        for tape in tapes.values():
            parts += [f"{label or 'draw'}={value!r}" for label, value in tape]
        return ", ".join(parts)

    def _settle(self, left: dict[str, str], outcome: dict[int, tuple[str, dict[str, int]]],
                drawn: dict[str, int]) -> str:  # fmt: skip
        """Policies whose own run would now differ from the shared one leave it, with the reason.

        Returns the outcome Hypothesis is shown: "pass" when any policy passed, else "reject".
        """
        full = {i for i, (_, used) in outcome.items() if used == drawn}
        statuses = {outcome[i][0] for i in full} & {PASS, REJECT}
        shown = PASS if PASS in statuses else REJECT
        for i, (result, _) in outcome.items():
            spec = self.specs[i]
            if result == FAIL:
                left[spec] = "failed in the shared run"
            elif result == DIVERGED or i not in full:
                left[spec] = "drew differently from the other policies"
            elif result != shown:
                left[spec] = "rejected an example the other policies accepted"
        return shown

    def failed_only(self, spec: str, nodeids: Sequence[str]) -> bool:
        """Whether ``spec`` left ``nodeids`` only by failing (each has its failing example recorded)."""
        gone = [n for n in nodeids if spec in self.own_run.get(n, {})]
        return bool(gone) and all(spec in self.failures.get(n, {}) for n in gone)

    def first_failure(self, spec: str, nodeids: Sequence[str]) -> PropertyResult:
        """The failing result ``spec`` met first in ``nodeids`` (see :meth:`failed_only`)."""
        found = next(self.failures[n][spec] for n in nodeids if spec in self.failures.get(n, {}))
        return dataclasses.replace(found, nodeids=list(nodeids))

    def to_json(self) -> dict[str, Any]:
        """What a worker process hands back (:mod:`crossattn_sizing.runs.share_process`)."""
        failures = {n: {s: dataclasses.asdict(r) for s, r in by.items()} for n, by in self.failures.items()}
        return {
            "own_run": self.own_run, "policy_free": sorted(self.policy_free), "failures": failures,
            "turns": self.turns, "bodies": self.bodies,
        }  # fmt: skip

    def merge_json(self, data: dict[str, Any]) -> None:
        """Fold a worker's share of the suite in (its tests are disjoint from this process's)."""
        self.own_run.update(data["own_run"])
        self.policy_free.update(data["policy_free"])
        for nodeid, by in data["failures"].items():
            self.failures[nodeid] = {s: PropertyResult(**r) for s, r in by.items()}
        self.turns += data["turns"]
        self.bodies += data["bodies"]

    def leaves(self, spec: str, nodeids: Sequence[str]) -> bool:
        """Whether ``spec`` left the shared run in any of ``nodeids`` (its own run must judge them)."""
        return any(spec in self.own_run.get(n, {}) for n in nodeids)

    def reads_policy(self, nodeids: Sequence[str]) -> bool:
        """Whether any of ``nodeids`` calls the policy."""
        return any(n not in self.policy_free for n in nodeids)
