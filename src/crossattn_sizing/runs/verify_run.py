"""A verify run: every property against each policy of a :class:`VerifyPlan`, into a :class:`VerifyReport`.

The command (:mod:`crossattn_sizing.commands.verify`) reads its options once
into the plan, then prints and writes the report; this module runs the plan.
Several policies under a profile with no example database share one run of
the suite (:mod:`.shared_run`, split between processes by :mod:`.share_process`);
otherwise each runs the suite in turn. Each policy also gets the exhaustive
prove row on the edge domain (:mod:`crossattn_sizing.prove.verify_row`) when
``-k`` keeps it. Ctrl-C ends the run with what ran so far, the rest marked
interrupted or not run.
"""

from __future__ import annotations

import contextlib
import copy
import io
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from crossattn_sizing.base import interrupts
from crossattn_sizing.base.errors import OptionError
from crossattn_sizing.base.processes import temp_folder_while
from crossattn_sizing.base.threads import sharing_cores
from crossattn_sizing.engine.registry import is_engine
from crossattn_sizing.findings.results import Finding, PropertyResult
from crossattn_sizing.findings.startup import NAME as STARTUP_ROW
from crossattn_sizing.prove.edges import edge_domain
from crossattn_sizing.prove.verify_row import NAME as PROVE_ROW
from crossattn_sizing.prove.verify_row import prove_property
from crossattn_sizing.runs.profiles import database_folder, with_max_examples
from crossattn_sizing.runs.share_process import ShareWorker, split_shared, split_tests
from crossattn_sizing.runs.shared_run import POLICY_FREE, SAME_ANSWERS, SharedPolicies
from crossattn_sizing.runs.suite import properties_dir, run_suite
from crossattn_sizing.runs.verify_report import PolicyVerdict, VerifyReport
from crossattn_sizing.specs.resolve import Isolation, Subject


@dataclass(frozen=True)
class VerifyPlan:
    """What a verify run needs, read once from the command line by the command (which keeps the
    output paths: it writes the report)."""

    specs: list[str]
    """The policies as given, in order: the report's columns."""
    subjects: dict[str, Subject]
    """Each spec resolved: loaded and checked, with its name and what it is expected to do."""
    impl: str
    device: str
    profile: str
    """The Hypothesis profile named (the report says it; the shared run's workers are given it)."""
    max_examples: int | None
    seed: int | None
    select: list[str]
    """``-k`` expressions; none selects every property."""
    jobs: int
    """Processes for the shared run of several policies, or for one policy's run of an engine's code."""
    isolation: Isolation

    @property
    def run_profile(self) -> str:
        """The profile the suite runs under: :attr:`profile` with ``--max-examples`` applied."""
        return with_max_examples(self.profile, self.max_examples)

    @property
    def proves(self) -> bool:
        """Whether ``-k`` keeps the edge-domain prove row."""
        return wants_prove(self.select)


def verify(plan: VerifyPlan) -> VerifyReport:
    """Run the plan; the report holds what ran before any Ctrl-C, the rest marked interrupted or not run."""
    verdicts: list[PolicyVerdict] = []
    notes: list[str] = []
    profile = plan.run_profile
    try:
        if plan.isolation.note:
            notes.append(plan.isolation.note)
        check_impl(plan.impl, plan.device, plan.isolation)  # imports torch: Ctrl-C often lands here
        interrupted = run_policies(plan, profile, verdicts, notes)
    except KeyboardInterrupt:  # outside pytest (which reports its own): between or before suites
        interrupted = True
    # Policies the interrupt kept from running are listed, as not run, never as holding.
    verdicts += [verdict(plan.subjects[s], []) for s in plan.specs[len(verdicts) :]]
    # No new work after Ctrl-C (the findings search imports torch and runs Hypothesis).
    findings = [] if interrupted else collect_findings()
    if not interrupted and wants_row(plan.select, STARTUP_ROW):
        startup_rows(plan, verdicts, findings)
    folder = database_folder(profile)
    return VerifyReport(plan.profile, plan.impl, plan.device, plan.seed, verdicts, findings, interrupted,
                        notes=notes, database=None if folder is None else str(folder))  # fmt: skip


def verdict(subject: Subject, results: list[PropertyResult], interrupted: bool = False) -> PolicyVerdict:
    """A policy's verdict row: its display name and what it is expected to do (:class:`Subject`)."""
    return PolicyVerdict(subject.name, subject.expected_to_hold, results, interrupted=interrupted)


def collect_findings() -> list[Finding]:
    """Findings the implementation models (e.g. the DCP cross-attention write path)."""
    try:
        from crossattn_sizing.findings.dcp import all_findings
    except ModuleNotFoundError as exc:
        if exc.name != "torch":  # only a missing torch (the implementation extra) means no findings
            raise
        return []
    return all_findings()


def check_impl(spec: str, device: str, isolation: Isolation) -> None:
    """Build the implementation once up front: a bad ``--impl`` or a missing GPU is one line, exit 2."""
    from crossattn_sizing.specs.resolve import resolve_impl

    for line in resolve_impl(spec, device, isolation).provenance:  # whose kernels the verdicts are about
        print(f"impl {spec}: {line}")


def startup_rows(plan: VerifyPlan, verdicts: list[PolicyVerdict], findings: list[Finding]) -> None:
    """Each subject whose release builds start-up batches the harness runs (``policy.startup``: vLLM) gets
    the start-up row (:mod:`crossattn_sizing.findings.startup`) and, where short, its encoder finding."""
    from crossattn_sizing.findings.startup import encoder_reservation_finding, startup_row

    for v, spec in zip(verdicts, plan.specs, strict=False):
        loaded = plan.subjects[spec].loaded
        if v.interrupted or v.error or not callable(getattr(loaded, "startup", None)):
            continue
        interrupts.announce(f"verify: policy {spec}: its own start-up batches")
        v.properties.append(startup_row(loaded, spec))
        found = encoder_reservation_finding(loaded, spec)
        if found is not None:
            findings.append(found)


def wants_prove(select: list[str]) -> bool:
    """Whether every ``-k`` expression selects the edge-domain prove row, as pytest would match it.

    pytest's own expression grammar decides, so ``-k 'not prove'`` leaves the row
    out and ``-k 'test_coverage or prove'`` keeps it.
    """
    return wants_row(select, PROVE_ROW)


def wants_row(select: list[str], row: str) -> bool:
    """Whether every ``-k`` expression selects the row named ``row``, as pytest would match it."""
    from _pytest.mark.expression import Expression

    name = row.lower()
    return all(
        Expression.compile(expr).evaluate(lambda word, *_, **__: word.lower() in name)  # type: ignore[arg-type]
        for expr in select
    )


def can_share(profile: str) -> bool:
    """Whether one shared run may judge several policies (:mod:`crossattn_sizing.runs.shared_run`).

    Only without an example database: a database replays what it stored for
    one policy (they are kept per policy), so each policy's run would start
    from different examples.
    """
    from hypothesis import settings

    from crossattn_sizing.runs import profiles

    profiles.register_profiles()
    return settings.get_profile(profile).database is None


class OverallBar:
    """One progress bar over every policy's work, with an ETA.

    Units are tests of the property suite plus one per prove row. A suite run
    whose size is not known yet (the next policy's, in order) is guessed to be
    as large as the first one was; the shared run's follow-ups are planned as
    soon as it ends, so the ETA settles after the first run. Suite runs may
    report at once (the shared run's worker processes, read on threads).
    """

    def __init__(self, progress: Progress, runs_to_come: int, prove_rows: int) -> None:
        self.progress = progress
        self.task = progress.add_task("verify", total=None)
        self.runs_to_come = runs_to_come
        self.planned = prove_rows
        self.first_run = 0
        self.suites: list[int] = []  # tests done, per suite run
        self.steps = 0  # prove rows done
        self.lock = threading.Lock()

    def plan(self, units: int) -> None:
        """Add ``units`` to the bar's total before the work they stand for starts."""
        with self.lock:
            self.planned += units
        self._show(None)

    def suite(self, label: str, planned: bool = False) -> Callable[[int, int, str], None]:
        """The ``on_progress`` of one suite run (``planned``: its size was given to :meth:`plan`)."""
        with self.lock:
            index = len(self.suites)
            self.suites.append(0)
        counted = planned

        def on_progress(done: int, total: int, nodeid: str) -> None:
            nonlocal counted
            with self.lock:
                if not counted:
                    counted = True
                    self.planned += total
                    self.runs_to_come = max(0, self.runs_to_come - 1)
                    self.first_run = self.first_run or total
                self.suites[index] = done
            self._show(f"{label}: {nodeid.split('::')[-1]}")

        return on_progress

    def step(self, description: str, units: int = 0) -> None:
        """Mark ``units`` done and show ``description`` as what runs now."""
        with self.lock:
            self.steps += units
        self._show(description)

    def _show(self, description: str | None) -> None:
        with self.lock:
            total = self.planned + self.runs_to_come * self.first_run
            fields: dict[str, Any] = {"completed": sum(self.suites) + self.steps, "total": total or None}
        if description is not None:
            fields["description"] = description
        self.progress.update(self.task, **fields)


def run_policies(plan: VerifyPlan, profile: str, verdicts: list[PolicyVerdict], notes: list[str]) -> bool:
    """Judge every policy, appending its verdict; True when Ctrl-C stopped it.

    Several policies under a profile with no example database share one run
    (:func:`run_shared`); otherwise each runs the suite in turn. A
    KeyboardInterrupt that escapes (raised outside pytest) reaches :func:`verify`,
    with the policies in progress already recorded as interrupted.
    """
    specs = plan.specs
    shared = len(specs) > 1 and can_share(profile)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        prove_rows = len(specs) if plan.proves else 0
        bar = OverallBar(progress, min(len(specs), max(1, plan.jobs)) if shared else len(specs), prove_rows)
        if shared:
            return run_shared(plan, profile, verdicts, notes, bar)
        return run_each(plan, profile, verdicts, bar)


def suite_for(plan: VerifyPlan, spec: str, profile: str, on_progress: Callable[[int, int, str], None],
              **kwargs: Any) -> tuple[list[PropertyResult], bool]:  # fmt: skip
    """One quiet in-process run of the suite; its results and whether Ctrl-C stopped it. The plan's
    subject for ``spec`` (resolved once, by :func:`crossattn_sizing.commands.verify.plan_of`) is handed to
    the run as it is, never resolved again from its spec."""
    from crossattn_sizing.runs.pytest_plugin import ResolvedPolicy

    subject = plan.subjects.get(spec)
    given = [ResolvedPolicy(spec, subject.loaded)] if subject is not None else []
    kwargs["plugins"] = [*kwargs.get("plugins", ()), *given]
    # Hypothesis and pytest print to stdout as they go; the report says it all once.
    with contextlib.redirect_stdout(io.StringIO()):
        results, code = run_suite(
            spec, impl=plan.impl, device=plan.device, profile=profile, seed=plan.seed,
            on_progress=on_progress, extra_args=plan.isolation.plugin_args(),
            **{"select": plan.select, **kwargs},
        )  # fmt: skip
    return results, code == 2 or interrupts.requested()  # Ctrl-C inside pytest


def prove_row(subject: Subject, bar: OverallBar) -> PropertyResult:
    """Beside the sampled properties, the exhaustive check on the edge domain."""
    spec = subject.spec
    parts = edge_domain()
    size = sum(p.size for p in parts)
    checked = 0

    def advance(n: int) -> None:
        nonlocal checked
        checked += n
        bar.step(f"{spec}: prove on the edge domain ({checked:,} of {size:,} configs)")

    result = prove_property(subject.loaded, spec, parts, advance)
    bar.step(f"{spec}: prove done", 1)
    return result


def run_each(plan: VerifyPlan, profile: str, verdicts: list[PolicyVerdict], bar: OverallBar) -> bool:
    """Run the suite for each policy in turn (a profile with an example database)."""
    subjects = plan.subjects
    for spec in plan.specs:
        if interrupts.requested():
            return True
        # Interrupted until its suite reports: a Ctrl-C landing anywhere from here on
        # (start-up, imports, between tests) leaves this policy marked as interrupted.
        verdicts.append(verdict(subjects[spec], [], interrupted=True))
        interrupts.announce(f"verify: policy {spec}: running the property suite")
        if plan.jobs > 1 and runs_engine(plan, spec):
            # The prove row runs here once this process's share is done, beside the other share.
            prove = (lambda subject=subjects[spec]: [prove_row(subject, bar)]) if plan.proves else None
            with temp_folder_while("crossattn-verify-") as folder:
                results, interrupted = engine_suite(plan, spec, profile, bar, folder, prove)
        else:
            results, interrupted = suite_for(plan, spec, profile, bar.suite(spec))
            if not interrupted and plan.proves:
                results.append(prove_row(subjects[spec], bar))
        verdicts[-1] = verdict(subjects[spec], results, interrupted=interrupted)
        if interrupted:  # report what ran, then stop
            return True
    return False


def settled(subject: Subject, sharing: SharedPolicies, nodeids: list[str]) -> bool:
    """Whether a policy expected to fail only failed this property in the shared run (its verdict stands)."""
    return not subject.expected_to_hold and sharing.failed_only(subject.spec, nodeids)


def run_shared(
    plan: VerifyPlan, profile: str, verdicts: list[PolicyVerdict], notes: list[str], bar: OverallBar
) -> bool:
    """One run of the suite for every policy, then each policy's own run of what it left.

    See :mod:`crossattn_sizing.runs.shared_run` for why the verdicts are those of
    separate runs. A policy that failed a property in the shared run (or whose
    own run would have drawn differently) runs that property again alone, so
    its verdict and its diagnosis come from its own run; only a built-in
    expected to fail keeps a failing example Hypothesis generated, unshrunk
    and saying so (its verdict is settled either way).
    """
    specs, subjects = plan.specs, plan.subjects
    verdicts += [verdict(subjects[s], [], interrupted=True) for s in specs]
    interrupts.announce(f"verify: policy {', '.join(specs)}: one shared run of the property suite")
    sharing = SharedPolicies(specs, [subjects[s].loaded for s in specs])
    with temp_folder_while("crossattn-verify-") as folder:
        results, interrupted = shared_suite(plan, profile, sharing, bar, folder)
    left = {spec: [r for r in results if sharing.leaves(spec, r.nodeids)] for spec in specs}
    # A policy expected to fail that failed a property in the shared run keeps that failing example
    # (its verdict is settled; shrinking it again for each pre-fix variant is what made verify slow).
    # Every other policy that left runs the property alone: its verdict and diagnosis are its own run's.
    kept = {
        spec: [r for r in left[spec] if settled(subjects[spec], sharing, r.nodeids)] for spec in specs
    }
    again = {spec: [r for r in left[spec] if r not in kept[spec]] for spec in specs}
    notes.append(
        f"shared run: {sharing.turns:,} policy-examples judged with {sharing.bodies:,} runs of a test body"
        + "".join(f"; {spec} ran {len(rs)} properties again alone" for spec, rs in again.items() if rs)
    )
    bar.plan(sum(len(r.nodeids) for rs in again.values() for r in rs))
    alone = {spec: [n for r in again[spec] for n in r.nodeids] for spec in specs}
    own: dict[str, dict[str, PropertyResult]] = {
        spec: {r.name: sharing.first_failure(spec, r.nodeids) for r in kept[spec]} for spec in specs
    }
    if not interrupted:
        interrupted = own_runs(plan, profile, alone, own, bar, again)
    for i, spec in enumerate(specs):
        properties = [shared_result(r, sharing, own[spec], left[spec]) for r in results]
        if not interrupted and plan.proves:
            properties.append(prove_row(subjects[spec], bar))
        verdicts[i] = verdict(subjects[spec], properties, interrupted=interrupted)
    return interrupted


def own_runs(plan: VerifyPlan, profile: str, alone: dict[str, list[str]],
             own: dict[str, dict[str, PropertyResult]], bar: OverallBar,
             again: dict[str, list[PropertyResult]]) -> bool:  # fmt: skip
    """Each policy's own run of the tests it left the shared run in (``alone``), into ``own``.

    With ``--jobs`` above 1 the policies are split between this process and
    one worker (:func:`~crossattn_sizing.runs.share_process.run_alone`), the
    most tests first to the less loaded side: each own run is the same pytest
    run wherever it runs (its own seed, no sharing), so only the wall time
    changes. True when Ctrl-C stopped them.
    """
    waiting = sorted((s for s in plan.specs if alone[s]), key=lambda s: (-len(alone[s]), plan.specs.index(s)))
    sides: list[list[str]] = [[], []]
    for spec in waiting:  # greedy: each to the side with fewer tests so far
        sides[min((0, 1), key=lambda k: sum(len(alone[s]) for s in sides[k]))].append(spec)
    mine, theirs = (waiting, []) if plan.jobs < 2 or len(waiting) < 2 else sides
    mine, theirs = sorted(mine, key=plan.specs.index), sorted(theirs, key=plan.specs.index)
    processes = 2 if theirs else 1  # this one, and a worker when it has a share
    with temp_folder_while("crossattn-verify-") as folder:
        worker = None
        if theirs:
            request = {**share_request(plan), "alone": [[s, alone[s]] for s in theirs]}
            progress = bar.suite("own runs (worker)", planned=True)
            worker = ShareWorker(request, folder / "alone", progress, processes=processes)
        interrupted = False
        try:
            with sharing_cores(processes):
                for spec in mine:
                    count = len(again[spec])
                    interrupts.announce(f"verify: policy {spec}: its own run of {count} properties")
                    ran, interrupted = suite_for(plan, spec, profile, bar.suite(spec, planned=True),
                                                 only=alone[spec], select=())  # fmt: skip
                    own[spec].update({r.name: r for r in ran})
                    if interrupted:
                        break
        except BaseException:
            if worker is not None:
                worker.abandon()
            raise
        if worker is not None:
            for spec in theirs:
                interrupts.announce(f"verify: policy {spec}: its own run of {len(again[spec])} properties "
                                    "(in the worker process)")  # fmt: skip
            if interrupted:
                worker.interrupt()
            ran_there, stopped = worker.finish_alone()
            for spec, ran in ran_there.items():
                own[spec].update({r.name: r for r in ran})
            interrupted = interrupted or stopped
    return interrupted


def share_request(plan: VerifyPlan) -> dict[str, Any]:
    """What a worker process needs of verify's options (:mod:`crossattn_sizing.runs.share_process`)."""
    return {"specs": plan.specs, "impl": plan.impl, "device": plan.device, "profile": plan.profile,
            "max_examples": plan.max_examples, "seed": plan.seed, "select": plan.select,
            "isolation": [plan.isolation.in_process, plan.isolation.timeout]}  # fmt: skip


def shared_suite(plan: VerifyPlan, profile: str, sharing: SharedPolicies, bar: OverallBar,
                 folder: Path) -> tuple[list[PropertyResult], bool]:  # fmt: skip
    """The shared run, its tests split between this process and ``--jobs - 1`` workers.

    The unit is a file, or a test where :data:`.share_process.SHARED_WEIGHTS` names one: the
    attention file alone was more than half the run. Each test draws its examples from its own
    seed, so the split changes the wall time only.
    """
    root = properties_dir()
    files = sorted(root.glob("test_*.py"))
    shares = split_shared(files, plan.jobs) if plan.jobs > 1 else [[f.name for f in files]]
    nodeids = [[f"{root.name}/{unit}" for unit in share] for share in shares]
    return split_suite(plan, plan.specs, profile, sharing, bar, folder, nodeids, "all policies")


def runs_engine(plan: VerifyPlan, spec: str) -> bool:
    """Whether ``spec``'s suite reads an engine's own code (as the policy or the implementation).

    Its examples wait on the engine's worker (vLLM's kernels interpreted on a
    CPU machine: most of the run, reports/bench_engine.md), so a second judge
    process with its own engine worker puts them on a second core.
    """
    return any(is_engine(s) for s in (spec, plan.impl))


def engine_suite(plan: VerifyPlan, spec: str, profile: str, bar: OverallBar, folder: Path,
                 meanwhile: Callable[[], list[PropertyResult]] | None = None,
                 ) -> tuple[list[PropertyResult], bool]:  # fmt: skip
    """One policy's run of the suite, its tests split between this process and ``--jobs - 1`` workers.

    The unit is a test, not a file (:func:`.share_process.split_tests`): one
    file's attention tests are most of an engine's run. As for the shared run,
    each test draws from its own seed, so its verdict is the one a single
    process gives. ``meanwhile`` (the prove row) runs here after this
    process's share, while the workers finish theirs; its rows come last.
    """
    root = properties_dir()
    shares = split_tests(sorted(root.glob("test_*.py")), plan.jobs)
    nodeids = [[f"{root.name}/{unit}" for unit in share] for share in shares]
    return split_suite(plan, [spec], profile, None, bar, folder, nodeids, spec, meanwhile)


def split_suite(plan: VerifyPlan, specs: list[str], profile: str, sharing: SharedPolicies | None,
                bar: OverallBar, folder: Path, nodeids: list[list[str]], label: str,
                meanwhile: Callable[[], list[PropertyResult]] | None = None,
                ) -> tuple[list[PropertyResult], bool]:  # fmt: skip
    """``nodeids[0]`` run here, each other share in a worker process; the results joined.

    ``sharing`` is the shared run's plugin for several ``specs`` (``None``:
    one policy, a plain run in each process). ``meanwhile`` runs here after
    this process's share unless it was interrupted; its results follow the
    suite's. A Ctrl-C here is passed on to the workers, and what they ran is kept.
    """
    request = {**share_request(plan), "specs": specs}
    workers = [
        ShareWorker({**request, "files": share}, folder / f"worker{i}", bar.suite(f"{label} (worker)"),
                    processes=len(nodeids))
        for i, share in enumerate(nodeids[1:])
    ]
    try:
        with sharing_cores(len(nodeids)):
            results, interrupted = suite_for(plan, specs[0], profile, bar.suite(label),
                                             plugins=[sharing] if sharing is not None else [],
                                             only=nodeids[0], allow_empty=len(nodeids) > 1)  # fmt: skip
            after = meanwhile() if meanwhile is not None and not interrupted else []
    except BaseException:  # bad input or a Ctrl-C outside pytest: the workers' shares are not wanted
        for worker in workers:
            worker.abandon()
        raise
    finally:
        if sharing is not None:
            sharing.restore()
    for worker in workers:
        if interrupted:  # what the workers ran so far is kept
            worker.interrupt()
        theirs, stopped, state = worker.finish()
        results += theirs
        interrupted = interrupted or stopped
        if state is not None and sharing is not None:
            sharing.merge_json(state)
    if not results and plan.select and not interrupted:
        raise OptionError("-k", " ".join(repr(s) for s in plan.select), "selects no property of the suite")
    return [*sorted(results, key=lambda r: r.name), *after], interrupted


def shared_result(result: PropertyResult, sharing: SharedPolicies, own: dict[str, PropertyResult],
                  left: list[PropertyResult]) -> PropertyResult:  # fmt: skip
    """One policy's result for a property of the shared run: its own run's, or the shared one, saying so."""
    if any(r.name == result.name for r in left):
        mine = own.get(result.name)
        if mine is not None:
            return mine
        return PropertyResult(result.name, nodeids=list(result.nodeids),
                              reason="left the shared run; interrupted before its own run")  # fmt: skip
    copied = copy.deepcopy(result)
    copied.shared = SAME_ANSWERS if sharing.reads_policy(result.nodeids) else POLICY_FREE
    return copied
