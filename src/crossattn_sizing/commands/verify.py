"""``crossattn-sizing verify``: the main job. Every property against each chosen policy.

Prints a policy x property verdict table, each failure with its shrunk
counterexample, diagnosis and reproduce command, then any findings. Exits
non-zero exactly when a policy expected to hold fails: the pre-fix sizing
failing is the harness working, not a failed run.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import sys
import tempfile
import threading
from collections.abc import Callable
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

from crossattn_sizing import interrupts, standard_output
from crossattn_sizing.commands import options
from crossattn_sizing.core.policies import BUILTIN_POLICIES
from crossattn_sizing.errors import OptionError, refuse_spelling
from crossattn_sizing.findings.capacity_map import draw, require_matplotlib
from crossattn_sizing.findings.results import PropertyResult
from crossattn_sizing.limits import int_arg
from crossattn_sizing.prove.edges import edge_domain
from crossattn_sizing.prove.verify_row import NAME as PROVE_ROW
from crossattn_sizing.prove.verify_row import prove_property
from crossattn_sizing.resolve import Isolation, Subject, resolve_policy
from crossattn_sizing.runs.outputs import check_outputs, output_file
from crossattn_sizing.runs.profiles import with_max_examples
from crossattn_sizing.runs.share_process import ShareWorker, split
from crossattn_sizing.runs.shared_run import POLICY_FREE, SAME_ANSWERS, SharedPolicies
from crossattn_sizing.runs.suite import properties_dir, run_suite
from crossattn_sizing.runs.verify_report import Finding, PolicyVerdict, VerifyReport
from crossattn_sizing.settings import PROFILES


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "verify",
        help="run every property against each sizing policy and report verdicts",
        epilog="Without --seed, profiles other than ci are random. --markdown writes one capacity map per "
        "policy beside the report (FILE-map-POLICY.png; needs the 'map' extra). exit status: 0 every "
        "policy ran and those expected to hold hold; 1 one of them fails; 2 bad input; 3 nothing failed "
        "but something did not run; 130 Ctrl-C",
    )
    options.POLICY.add(p, shown_default="every built-in", repeatable=True)
    options.IMPL.add(p, default="torch")
    options.DEVICE.add(p, default="cpu")
    p.add_argument("--hypothesis-profile", dest="profile", default="ci", choices=PROFILES,
                   help="Hypothesis settings profile (default ci)")  # fmt: skip
    refuse_spelling(p.add_argument, "--profile", "--hypothesis-profile")
    p.add_argument("--max-examples", type=int_arg, help="override the profile's examples per property")
    options.SEED.add(p, shown_default="random, or fixed by the profile")
    options.SELECT.add(p, default=[], shown_default="every property", repeatable=True)
    options.JOBS.add(p, default=min(2, os.cpu_count() or 1), shown_default="2 where there are 2 or more CPUs")
    options.add_isolation(p)
    options.JSON.add(p)
    p.add_argument("--junit-xml", type=Path, help="write the report as JUnit XML to this file")
    options.MARKDOWN.add(p)
    options.ENGINE.add(p)
    p.set_defaults(func=run)


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
    return [Finding(f.title, f.detail) for f in all_findings()]


def draw_maps(markdown: Path, specs: list[str], subjects: dict[str, Subject]) -> dict[str, str]:
    """One capacity map per policy beside the Markdown report; the image paths relative to it.

    An engine release's policy answers one config at a time through its
    worker, too slow for a plane of configs: its map is left out, saying so.
    """
    import re

    maps: dict[str, str] = {}
    for spec in specs:
        if spec.strip().startswith("vllm"):
            maps[subjects[spec].name] = (
                "not drawn (an engine policy answers through its worker, one config at a "
                f"time; draw it with crossattn-sizing map --policy {spec})"
            )
            continue
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", spec)
        image = markdown.with_name(f"{markdown.stem}-map-{slug}.png")
        draw([(subjects[spec].name, subjects[spec].loaded, 16)], image)
        maps[subjects[spec].name] = image.name
    return maps


def check_impl(spec: str, device: str, isolation: Isolation) -> None:
    """Build the implementation once up front: a bad ``--impl`` or a missing GPU is one line, exit 2."""
    from crossattn_sizing.resolve import resolve_impl

    for line in resolve_impl(spec, device, isolation).provenance:  # whose kernels the verdicts are about
        print(f"impl {spec}: {line}")


def run(args: argparse.Namespace) -> int:
    if args.engine is not None:
        from crossattn_sizing.commands.sglang_verify import run_engine_verify

        return run_engine_verify(args)
    specs = args.policy or list(BUILTIN_POLICIES)
    # Everything the user typed is checked before any suite runs; the outputs first, made absolute
    # before any user module is imported (one that changes the working directory moves nothing).
    check_outputs({"--json": args.json, "--junit-xml": args.junit_xml, "--markdown": args.markdown})
    json_path = output_file("--json", args.json)
    junit_path = output_file("--junit-xml", args.junit_xml)
    markdown_path = output_file("--markdown", args.markdown)
    if markdown_path is not None:
        require_matplotlib()
    args.isolation = options.isolation(args)
    subjects = {spec: resolve_policy(spec, args.isolation) for spec in specs}
    profile = with_max_examples(args.profile, args.max_examples)
    verdicts: list[PolicyVerdict] = []
    notes: list[str] = []
    try:
        if args.isolation.note:
            notes.append(args.isolation.note)
        check_impl(args.impl, args.device, args.isolation)  # imports torch: Ctrl-C often lands here
        interrupted = run_policies(args, specs, subjects, profile, verdicts, notes)
    except KeyboardInterrupt:  # outside pytest (which reports its own): between or before suites
        interrupted = True
    # Policies the interrupt kept from running are listed, as not run, never as holding.
    verdicts += [verdict(subjects[s], []) for s in specs[len(verdicts) :]]
    # No new work after Ctrl-C (the findings search imports torch and runs Hypothesis).
    findings = [] if interrupted else collect_findings()
    report = VerifyReport(args.profile, args.impl, args.device, args.seed, verdicts, findings, interrupted,
                          notes=notes)
    # Files first: a second Ctrl-C during the table must not lose them.
    if json_path:
        report.write_json(json_path)
    if junit_path:
        report.write_junit(junit_path)
    if markdown_path:
        report.write_markdown(markdown_path, {} if interrupted else draw_maps(markdown_path, specs, subjects))
    # Piped output (CI logs, files) has no terminal width; give the table room instead of 80 columns.
    console = Console(width=None if sys.stdout.isatty() else 200)
    if interrupted:
        console.print("[yellow]interrupted: the report covers what ran before Ctrl-C[/]")
    report.render(console)
    failure = standard_output.current_failure()
    if failure is not None and not interrupted:  # the table was lost: the status says so, and the file
        report.output_error = standard_output.describe(failure)
        if json_path:  # written again, so its exit_status is the process's
            report.write_json(json_path)
    return report.exit_status


def wants_prove(select: list[str]) -> bool:
    """Whether every ``-k`` expression selects the edge-domain prove row, as pytest would match it.

    pytest's own expression grammar decides, so ``-k 'not prove'`` leaves the row
    out and ``-k 'test_coverage or prove'`` keeps it.
    """
    from _pytest.mark.expression import Expression

    name = PROVE_ROW.lower()
    return all(
        Expression.compile(expr).evaluate(lambda word, *_, **__: word.lower() in name) for expr in select
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


def run_policies(
    args: argparse.Namespace, specs: list[str], subjects: dict[str, Subject], profile: str,
    verdicts: list[PolicyVerdict], notes: list[str],
) -> bool:  # fmt: skip
    """Judge every policy, appending its verdict; True when Ctrl-C stopped it.

    Several policies under a profile with no example database share one run
    (:func:`run_shared`); otherwise each runs the suite in turn. A
    KeyboardInterrupt that escapes (raised outside pytest) reaches :func:`run`,
    with the policies in progress already recorded as interrupted.
    """
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
        prove_rows = len(specs) if wants_prove(args.select) else 0
        bar = OverallBar(progress, min(len(specs), max(1, args.jobs)) if shared else len(specs), prove_rows)
        if shared:
            return run_shared(args, specs, subjects, profile, verdicts, notes, bar)
        return run_each(args, specs, subjects, profile, verdicts, bar)


def suite_for(args: argparse.Namespace, spec: str, profile: str, on_progress: Callable[[int, int, str], None],
              **kwargs: Any) -> tuple[list[PropertyResult], bool]:  # fmt: skip
    """One quiet in-process run of the suite; its results and whether Ctrl-C stopped it."""
    # Hypothesis and pytest print to stdout as they go; the report says it all once.
    with contextlib.redirect_stdout(io.StringIO()):
        results, code = run_suite(
            spec, impl=args.impl, device=args.device, profile=profile, seed=args.seed,
            on_progress=on_progress, extra_args=args.isolation.plugin_args(),
            **{"select": args.select, **kwargs},
        )  # fmt: skip
    return results, code == 2 or interrupts.requested()  # Ctrl-C inside pytest


def prove_row(args: argparse.Namespace, subject: Subject, bar: OverallBar) -> PropertyResult:
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


def run_each(
    args: argparse.Namespace, specs: list[str], subjects: dict[str, Subject], profile: str,
    verdicts: list[PolicyVerdict], bar: OverallBar,
) -> bool:  # fmt: skip
    """Run the suite for each policy in turn (a profile with an example database)."""
    for spec in specs:
        if interrupts.requested():
            return True
        # Interrupted until its suite reports: a Ctrl-C landing anywhere from here on
        # (start-up, imports, between tests) leaves this policy marked as interrupted.
        verdicts.append(verdict(subjects[spec], [], interrupted=True))
        interrupts.announce(f"verify: policy {spec}: running the property suite")
        results, interrupted = suite_for(args, spec, profile, bar.suite(spec))
        if not interrupted and wants_prove(args.select):
            results.append(prove_row(args, subjects[spec], bar))
        verdicts[-1] = verdict(subjects[spec], results, interrupted=interrupted)
        if interrupted:  # report what ran, then stop
            return True
    return False


def settled(subject: Subject, sharing: SharedPolicies, nodeids: list[str]) -> bool:
    """Whether a policy expected to fail only failed this property in the shared run (its verdict stands)."""
    return not subject.expected_to_hold and sharing.failed_only(subject.spec, nodeids)


def run_shared(
    args: argparse.Namespace, specs: list[str], subjects: dict[str, Subject], profile: str,
    verdicts: list[PolicyVerdict], notes: list[str], bar: OverallBar,
) -> bool:  # fmt: skip
    """One run of the suite for every policy, then each policy's own run of what it left.

    See :mod:`crossattn_sizing.runs.shared_run` for why the verdicts are those of
    separate runs. A policy that failed a property in the shared run (or whose
    own run would have drawn differently) runs that property again alone, so
    its verdict and its diagnosis come from its own run; only a built-in
    expected to fail keeps a failing example Hypothesis generated, unshrunk
    and saying so (its verdict is settled either way).
    """
    verdicts += [verdict(subjects[s], [], interrupted=True) for s in specs]
    interrupts.announce(f"verify: policy {', '.join(specs)}: one shared run of the property suite")
    sharing = SharedPolicies(specs, [subjects[s].loaded for s in specs])
    with tempfile.TemporaryDirectory(prefix="crossattn-verify-") as folder:
        results, interrupted = shared_suite(args, specs, profile, sharing, bar, Path(folder))
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
    for i, spec in enumerate(specs):
        own = {r.name: sharing.first_failure(spec, r.nodeids) for r in kept[spec]}
        nodeids = [n for r in again[spec] for n in r.nodeids]
        if nodeids and not interrupted:
            interrupts.announce(f"verify: policy {spec}: its own run of {len(again[spec])} properties")
            ran, interrupted = suite_for(args, spec, profile, bar.suite(spec, planned=True),
                                         only=nodeids, select=())  # fmt: skip
            own.update({r.name: r for r in ran})
        properties = [shared_result(r, sharing, own, left[spec]) for r in results]
        if not interrupted and wants_prove(args.select):
            properties.append(prove_row(args, subjects[spec], bar))
        verdicts[i] = verdict(subjects[spec], properties, interrupted=interrupted)
    return interrupted


def shared_suite(args: argparse.Namespace, specs: list[str], profile: str, sharing: SharedPolicies,
                 bar: OverallBar, folder: Path) -> tuple[list[PropertyResult], bool]:  # fmt: skip
    """The shared run, its test files split between this process and ``--jobs - 1`` workers.

    Each test draws its examples from its own seed, so the split changes the
    wall time only. A Ctrl-C here is passed on to the workers, and what they
    ran is kept.
    """
    root = properties_dir()
    files = sorted(root.glob("test_*.py"))
    shares = split(files, max(1, args.jobs)) if args.jobs > 1 else [files]
    nodeids = [[f"{root.name}/{f.name}" for f in share] for share in shares]
    request = {"specs": specs, "impl": args.impl, "device": args.device, "profile": args.profile,
               "max_examples": args.max_examples, "seed": args.seed, "select": args.select,
               "isolation": [args.isolation.in_process, args.isolation.timeout]}  # fmt: skip
    workers = [
        ShareWorker({**request, "files": share}, folder / f"worker{i}", bar.suite("all policies (worker)"))
        for i, share in enumerate(nodeids[1:])
    ]
    try:
        results, interrupted = suite_for(args, specs[0], profile, bar.suite("all policies"),
                                         plugins=[sharing], only=nodeids[0],
                                         allow_empty=len(nodeids) > 1)  # fmt: skip
    except BaseException:  # bad input or a Ctrl-C outside pytest: the workers' shares are not wanted
        for worker in workers:
            worker.abandon()
        raise
    finally:
        sharing.restore()
    for worker in workers:
        if interrupted:  # what the workers ran so far is kept
            worker.interrupt()
        theirs, stopped, state = worker.finish()
        results += theirs
        interrupted = interrupted or stopped
        if state is not None:
            sharing.merge_json(state)
    if not results and args.select and not interrupted:
        raise OptionError("-k", " ".join(repr(s) for s in args.select), "selects no property of the suite")
    return sorted(results, key=lambda r: r.name), interrupted


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
