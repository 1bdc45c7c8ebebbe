"""``crossattn-sizing report --engine SPEC``: each failing property as an issue for the engine's tracker.

Runs the engine's properties as ``verify`` does (through the one seam,
:mod:`crossattn_sizing.runs.engine_verdicts`), and for each property that
fails writes ``DIR/<engine>-<property>.md`` in the engine tracker's own bug
form and the same content as ``.json`` (:mod:`crossattn_sizing.runs.issue_report`),
printing their paths, and beside them ``<engine>-<property>-repro.py``: the
release's lines on the failure's batch, needing only torch and numpy, run
here in a clean interpreter (:mod:`crossattn_sizing.runs.standalone`) and its
output recorded (with ``--fix``, ``-repro-fixed.py`` from the patched copy too).
No file names a path of this machine (:mod:`crossattn_sizing.runs.report_files`).
Beside the verdicts it can run, each from the engine's own code:

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
from crossattn_sizing.core.served import LATENT
from crossattn_sizing.engine.report_facts import ReportFacts, check_args, with_spec
from crossattn_sizing.engine.tracker_forms import FORMS
from crossattn_sizing.findings.results import PropertyResult
from crossattn_sizing.runs import release_table
from crossattn_sizing.runs.bisect import BisectResult, CommitRange, bisect, checkout_of, commit_range
from crossattn_sizing.runs.check_runs import run_check
from crossattn_sizing.runs.engine_verdicts import (
    EngineVerdicts,
    reported_family,
    run_engine,
    shown_path,
    shown_spec,
    tree_of,
)
from crossattn_sizing.runs.issue_report import FixCheck, IssueReport
from crossattn_sizing.runs.outputs import output_dir, write_json, write_text
from crossattn_sizing.runs.patched_tree import patched_copy, unloadable
from crossattn_sizing.runs.report_files import environment, places, release_of, scrubbed
from crossattn_sizing.runs.standalone import run_standalone

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
        help="a unified diff against the tree: applied to a copy, every property run on it, and the "
        "standalone script rendered from the copy must run clean",
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
    if not facts.releases:  # an engine run from a tree only has no release to run
        raise OptionError("--releases", args.releases, f"{facts.tracker} has no release table: "
                          f"{facts.no_releases or 'the harness runs no release of it'}")  # fmt: skip
    names = [r.strip() for r in args.releases.split(",") if r.strip()]
    for name in names:
        if not all(part.isdigit() for part in name.split(".")):
            raise OptionError("--releases", args.releases, f"{name!r} is not a release version (e.g. 0.24.0)")
    return names


def run(args: argparse.Namespace) -> int:
    """Run the properties on the spec and write one report per failure; the exit status."""
    spec = shown_spec(args.engine)  # a tree's path relative to here: no report names the machine's folders
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
        release = release_of(spec, verdicts.root, facts.engine)
        label = release or "(source tree)"
        # The patched copy goes with this block: its lines are rendered into a script now, run later.
        fixed_scripts = {
            r.name: facts.repro(argv, copy, f"{label} with {args.fix.name}") or ""
            for r in verdicts.failing
            if copy is not None and args.fix is not None and (argv := _argv(r)) is not None
        }
    failing = verdicts.failing
    for result in verdicts.latent:  # no upstream report: no served request reaches the case
        print(f"{result.name}: {LATENT} (no report written)")
        print(result.diagnosis)
    if not failing:
        judged = [p for p in verdicts.properties if p.outcome.judged]
        settled = (Outcome.HOLDS, Outcome.NOT_APPLICABLE, Outcome.LATENT)
        if judged and all(p.outcome in settled for p in verdicts.properties):
            print(f"nothing to report: every property ran and held on {spec} ({len(judged)} properties)")
            return 0
        unrun = [
            f"{p.name} ({p.outcome.value}{': ' + p.reason if p.reason else ''})"
            for p in verdicts.properties
            if p.outcome not in settled
        ]
        print(f"nothing fails on {spec}, but not everything ran: " + ("; ".join(unrun) or "no property ran"))
        return 3
    audit_table = None
    if table_file is None and releases and facts.release_source == "audit":
        audit_table = release_table.by_audit(releases)
    given = Path(spec.split("@", 1)[1]).expanduser() if "@" in spec else None
    where = places(given, *([args.fix.parent] if args.fix is not None else []), verdicts.root)
    for result in failing:
        report = _report(result, verdicts, facts, releases, table_file or audit_table, fix)
        if span is not None:
            report.bisect, report.bisect_note = _bisect(result, facts, spec, span)
        _complete(
            report,
            facts,
            verdicts.root,
            (release, label),
            args.fix,
            fixed_scripts.get(result.name, ""),
            out,
            where,
        )
        stem = out / report.slug
        write_text("--out", stem.with_suffix(".md"), scrubbed(report.markdown(), where))
        write_json(stem.with_suffix(".json"), scrubbed(report.to_json(), where), option="--out")
        print(f"wrote {stem.with_suffix('.md')}")
        print(f"wrote {stem.with_suffix('.json')}")
        for name in (report.repro_name, report.repro_fixed_name):
            if (out / name).is_file():
                print(f"wrote {out / name}")
    return 1


def _complete(report: IssueReport, facts: ReportFacts, root: Path, release: tuple[str, str],
              patch: Path | None, fixed_script: str, out: Path, where: dict[str, str]) -> None:  # fmt: skip
    """The tracker form's parts of ``report``: first paragraph, environment, code sites, the standalone
    scripts (written beside the report and run in a clean interpreter), the served case, the patch."""
    name = report.result.name
    argv = _argv(report.result)
    version, label = release
    report.form = FORMS.get(facts.engine)
    report.release = version
    report.summary = facts.summary(name, version)
    report.fixed_upstream = facts.fixed_upstream(name, version)
    report.expected = facts.expected(name)
    report.sites = facts.sites(root)
    report.environment = environment(report.form, version)
    if report.releases is not None:
        said = {r.release: facts.refuses(r.release) for r in report.releases.rows}
        report.refuses = {k: v for k, v in said.items() if v}
    if patch is not None:
        report.patch_text = patch.read_text(encoding="utf-8", errors="replace")
    if argv is None:
        return
    report.served = facts.served(argv)
    script = facts.repro(argv, root, label)
    for text, file, attr in ((script or "", report.repro_name, "standalone"),
                             (fixed_script, report.repro_fixed_name, "standalone_fixed")):  # fmt: skip
        if not text:
            continue
        write_text("--out", out / file, scrubbed(text, where))
        print(f"running {file} in a clean interpreter (torch and numpy only)")
        setattr(report, attr, run_standalone(out / file))
    report.script = scrubbed(script or "", where)
    report.fixed_script = scrubbed(fixed_script, where)


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
    elif table is None and not facts.releases:
        note = facts.no_releases or "Not computed: the harness runs no release of this engine."
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
        return FixCheck(shown_path(patch), replays, before, {}, not_checked=why)
    return FixCheck(shown_path(patch), replays, before, {p.name: p.outcome for p in after.properties})


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
