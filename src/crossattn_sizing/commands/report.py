"""``crossattn-sizing report --engine SPEC``: each failing property as an issue for the engine's tracker.

Runs the engine's properties as ``verify`` does (through the one seam,
:mod:`crossattn_sizing.runs.engine_verdicts`), and for each property that
fails writes ``DIR/<engine>-<property>.md`` and the same content as ``.json``
(:mod:`crossattn_sizing.runs.issue_report`), printing their paths. Beside the
verdicts it can run, each from the engine's own code:

- the release table (a release spec, ``--releases``, ``--release-table``):
  the first and last release with the defect;
- ``--fix PATCH``: the patch on a copy of the tree, the whole property set run on it;
- ``--bisect GOOD..BAD`` (``NAME@PATH`` in a git checkout): the first bad commit, once GOOD is
  seen to hold and BAD to fail.

Every option is checked before anything runs: a patch that is not a file, a
range not in the repository, a path that is not a git checkout is one line, exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
from pathlib import Path

from crossattn_sizing.base.errors import HarnessError, OptionError
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.commands import options
from crossattn_sizing.engine.report_facts import ReportFacts, check_args, with_spec
from crossattn_sizing.findings.results import PropertyResult
from crossattn_sizing.runs import release_table
from crossattn_sizing.runs.bisect import BisectResult, CommitRange, bisect, checkout_of, commit_range
from crossattn_sizing.runs.check_runs import run_check
from crossattn_sizing.runs.engine_verdicts import EngineVerdicts, reported_family, run_engine, tree_of
from crossattn_sizing.runs.issue_report import FixCheck, IssueReport
from crossattn_sizing.runs.outputs import output_dir, write_json, write_text
from crossattn_sizing.runs.patched_tree import patched_copy, unloadable

EPILOG = (
    "exit status: 0 nothing to report (every property ran and held; no file is written); 1 reports written "
    "(a property fails); 2 bad input (a spec, a --fix that does not apply, a --bisect range not in the "
    "repository, a PATH that is not a git checkout); 3 nothing failed but something did not run; 130 Ctrl-C"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``report``: its options and its help."""
    p = subparsers.add_parser(
        "report",
        help="write each property failing on an engine as an issue for its tracker (Markdown, JSON)",
        epilog=EPILOG,
    )
    options.ENGINE.add(p, required=True)
    options.OUT.add(p, default=".", shown_default="the current folder")
    p.add_argument(
        "--fix",
        metavar="PATCH",
        type=Path,
        help="a unified diff against the tree: applied to a copy, every property run on it",
    )
    p.add_argument(
        "--bisect",
        metavar="GOOD..BAD",
        help="with --engine NAME@PATH in a git checkout: the first bad commit by git bisect",
    )
    p.add_argument(
        "--releases",
        metavar="LIST",
        help="releases of the release table, comma-separated, or none (default: the engine's "
        "list for a release spec, none for a tree)",
    )
    p.add_argument(
        "--release-table",
        metavar="FILE",
        type=Path,
        help="vLLM: read the table from this `audit --json` file instead of running the audit",
    )
    options.SEED.add(p, shown_default="fixed by the ci profile")
    options.SELECT.add(p, default=[], shown_default="every property", repeatable=True)
    p.set_defaults(func=run)


def _releases(args: argparse.Namespace, facts: ReportFacts) -> list[str] | None:
    """The releases to run for the table, [] for none, None when a file gives it."""
    if args.release_table is not None:
        if args.releases is not None:
            raise OptionError("--releases", args.releases, "give --releases or --release-table, not both")
        if facts.release_source != "audit":
            raise OptionError("--release-table", str(args.release_table), "is an audit file: vLLM only")
        return None
    if args.releases is None:
        return list(facts.releases) if "==" in args.engine else []
    if args.releases.strip() == "none":
        return []
    names = [r.strip() for r in args.releases.split(",") if r.strip()]
    for name in names:
        if not all(part.isdigit() for part in name.split(".")):
            raise OptionError("--releases", args.releases, f"{name!r} is not a release version (e.g. 0.24.0)")
    return names


def run(args: argparse.Namespace) -> int:
    """Run the properties on the spec and write one report per failure; the exit status."""
    spec = args.engine.strip()
    facts: ReportFacts = reported_family(spec).report_facts()  # one line for a spec report does not take
    out = output_dir("--out", args.out)
    assert out is not None  # has a default
    releases = _releases(args, facts)
    table_file = release_table.from_audit_file(args.release_table) if args.release_table is not None else None
    span = None
    if args.bisect is not None:
        if "@" not in spec:
            raise OptionError("--bisect", args.bisect, "needs --engine NAME@PATH, a tree in a git checkout")
        tree = Path(spec.split("@", 1)[1]).expanduser().resolve()
        top = checkout_of(tree)
        span = (top, tree, commit_range(top, args.bisect))
    with contextlib.ExitStack() as stack:
        # The patch is applied (to a copy) before any property runs: one that does not apply is bad input.
        copy = (
            stack.enter_context(patched_copy(tree_of(spec), args.fix, spec)) if args.fix is not None else None
        )
        verdicts = run_engine(spec, profile="ci", seed=args.seed, select=args.select)
        fix = (
            _check_fix(args.fix, copy, verdicts, facts, args)
            if copy is not None and verdicts.failing
            else None
        )
    failing = verdicts.failing
    if not failing:
        judged = [p for p in verdicts.properties if p.outcome.judged]
        if judged and all(p.outcome in (Outcome.HOLDS, Outcome.NOT_APPLICABLE) for p in verdicts.properties):
            print(f"nothing to report: every property ran and held on {spec} ({len(judged)} properties)")
            return 0
        unrun = [
            f"{p.name} ({p.outcome.value}{': ' + p.reason if p.reason else ''})"
            for p in verdicts.properties
            if p.outcome not in (Outcome.HOLDS, Outcome.NOT_APPLICABLE)
        ]
        print(f"nothing fails on {spec}, but not everything ran: " + ("; ".join(unrun) or "no property ran"))
        return 3
    audit_table = None
    if table_file is None and releases and facts.release_source == "audit":
        audit_table = release_table.by_audit(releases)
    for result in failing:
        report = _report(result, verdicts, facts, releases, table_file or audit_table, fix)
        if span is not None:
            report.bisect, report.bisect_note = _bisect(result, facts, spec, span)
        stem = out / report.slug
        write_text("--out", stem.with_suffix(".md"), report.markdown())
        write_json(stem.with_suffix(".json"), report.to_json(), option="--out")
        print(f"wrote {stem.with_suffix('.md')}")
        print(f"wrote {stem.with_suffix('.json')}")
    return 1


def _argv(result: PropertyResult) -> list[str] | None:
    """The failure's check line as argv, or None when it reruns the test instead (no case of its own)."""
    if not result.reproduce or result.reruns_test:
        return None
    return check_args(result.reproduce)


def _report(
    result: PropertyResult,
    verdicts: EngineVerdicts,
    facts: ReportFacts,
    releases: list[str] | None,
    table: release_table.ReleaseTable | None,
    fix: FixCheck | None,
) -> IssueReport:
    argv = _argv(result)
    spec = verdicts.spec
    note = ""
    if table is None and releases:  # the check line on each release
        if argv is None:
            note = "Not computed: the failure has no check line to run on each release."
        else:
            engine = facts.engine
            table = release_table.by_check(
                releases, lambda v: with_spec(argv, facts.spec_option, f"{engine}=={v}")
            )
    elif table is None:
        note = (
            f"Not computed for a tree: name releases with --releases (e.g. --releases {facts.releases[-1]})"
            + (
                " or give an `audit --json` file with --release-table."
                if facts.release_source == "audit"
                else "."
            )
        )
    deployed = facts.deployed(result.name)
    deployed_case: list[str] = []
    deployed_line = ""
    argv_deployed = with_spec(deployed, facts.spec_option, spec) if deployed is not None else None
    # The deployed case runs only when the shrunk case is another one; it is shown only when it fails too.
    if (argv_deployed is not None and argv_deployed != argv
            and run_check(argv_deployed).verdict == Outcome.FAILS):  # fmt: skip
        deployed_case = facts.minimal_case(argv_deployed)
        deployed_line = shlex.join(["crossattn-sizing", *argv_deployed])
    return IssueReport(
        tracker=facts.tracker,
        spec=spec,
        result=result,
        facts=facts.steps(result.name),
        deployed_case=deployed_case,
        deployed_line=deployed_line,
        minimal_case=facts.minimal_case(argv)
        if argv is not None
        else [f"- the harness's shrunk example: `{result.falsifying_example}`"],
        site=facts.site(result.name, verdicts.root, spec, argv or []),
        releases=table,
        releases_note=note,
        fix=fix,
        provenance=list(verdicts.report.notes),
    )


def _check_fix(
    patch: Path, copy: Path, verdicts: EngineVerdicts, facts: ReportFacts, args: argparse.Namespace
) -> FixCheck:
    """The failures' cases and every property on ``copy``, the tree with ``patch`` applied; a copy that
    does not load is the fix not run (said in the user's terms), and the report is still written."""
    spec = verdicts.spec
    before = {p.name: p.outcome for p in verdicts.properties}
    patched = f"{facts.engine}@{copy}"
    print(f"--fix: {patch} applies; running the properties on the patched copy")
    replays = {}
    for failure in verdicts.failing:
        argv = _argv(failure)
        replays[failure.name] = (
            run_check(with_spec(argv, facts.spec_option, patched)).verdict
            if argv is not None
            else Outcome.NOT_RUN
        )
    try:
        after = run_engine(patched, profile="ci", seed=args.seed, select=args.select)
    except HarnessError as exc:  # the patch applies but the copy does not load: the fix is not run
        why = unloadable(copy, patch, spec, exc)
        print(f"--fix: the patched copy does not load ({why}): the fix is not checked")
        return FixCheck(str(patch), replays, before, {}, not_checked=why)
    return FixCheck(str(patch), replays, before, {p.name: p.outcome for p in after.properties})


def _bisect(
    result: PropertyResult, facts: ReportFacts, spec: str, span: tuple[Path, Path, CommitRange]
) -> tuple[BisectResult | None, str]:
    """Bisect the failure's check line over the range; a note instead when it has none. When the
    range's ends are not what it claims (GOOD fails, BAD holds, either cannot run), one line says so
    and no commit is named."""
    argv = _argv(result)
    if argv is None:
        return None, "Not bisected: the failure has no check line (its replay reruns the test)."
    top, tree, commits = span

    def step(commit: str, run: object) -> None:
        print(f"bisect: {commit[:12]} {getattr(run, 'verdict', '')}")

    found = bisect(
        top, tree, commits, lambda t: with_spec(argv, facts.spec_option, f"{facts.engine}@{t}"), on_step=step
    )
    if found.first_bad is None:
        print(f"bisect: no first bad commit named for {result.name}: {found.why_none}")
    return found, ""
