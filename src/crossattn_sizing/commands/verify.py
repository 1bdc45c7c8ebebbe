"""``crossattn-sizing verify``: the main job. Every property against each chosen policy.

Prints a policy x property verdict table, each failure with its shrunk
counterexample, diagnosis and reproduce command, then any findings. Exits
non-zero exactly when a policy expected to hold fails: the pre-fix sizing
failing is the harness working, not a failed run.

The command reads its options once into a
:class:`~crossattn_sizing.runs.verify_run.VerifyPlan`, runs it
(:func:`~crossattn_sizing.runs.verify_run.verify`), then writes the report's
files and prints its table.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from crossattn_sizing.base import standard_output
from crossattn_sizing.base.errors import OptionError, refuse_spelling
from crossattn_sizing.base.limits import int_arg
from crossattn_sizing.commands import options
from crossattn_sizing.commands.engines import Engine, engine_of
from crossattn_sizing.core.policies import BUILTIN_POLICIES
from crossattn_sizing.engine.interface import EngineMode
from crossattn_sizing.engine.registry import is_engine
from crossattn_sizing.findings.capacity_map import draw, require_matplotlib
from crossattn_sizing.runs.engine_verify import engine_verify
from crossattn_sizing.runs.outputs import ReportFiles
from crossattn_sizing.runs.verify_report import VerifyReport
from crossattn_sizing.runs.verify_run import VerifyPlan, verify
from crossattn_sizing.specs.resolve import Subject, resolve_policy


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``verify``: its options and its help."""
    p = subparsers.add_parser(
        "verify",
        help="run every property against each sizing policy and report verdicts",
        epilog="Without --seed, profiles other than ci are random. --markdown writes one capacity map per "
        "policy beside the report (FILE-map-POLICY.png; needs the 'map' extra). exit status: 0 every "
        "policy ran and those expected to hold hold; 1 one of them fails; 2 bad input; 3 nothing failed "
        "but something did not run; 130 Ctrl-C",
    )
    options.POLICY.add(p, shown_default="every built-in", repeatable=True)
    options.IMPL.add(p, default="torch")  # from CROSSATTN_IMPL when not typed; --engine refuses it typed
    options.DEVICE.add(p, default="cpu")
    options.PROFILE.add(p, default="ci")
    refuse_spelling(p.add_argument, "--profile", "--hypothesis-profile")
    p.add_argument("--max-examples", type=int_arg, help="override the profile's examples per property")
    options.SEED.add(p, shown_default="random, or fixed by the profile")
    options.SELECT.add(p, default=[], shown_default="every property", repeatable=True)
    options.JOBS.add(p, shown_default="2 where there are 2 or more CPUs")
    options.add_isolation(p)
    options.JSON.add(p)
    p.add_argument("--junit-xml", type=Path, help="write the report as JUnit XML to this file")
    options.MARKDOWN.add(p)
    options.ENGINE.add(p)
    p.set_defaults(func=run)


def draw_maps(markdown: Path, specs: list[str], subjects: dict[str, Subject]) -> dict[str, str]:
    """One capacity map per policy beside the Markdown report; the image paths relative to it.

    An engine release's policy answers one config at a time through its
    worker, too slow for a plane of configs: its map is left out, saying so.
    """
    import re

    maps: dict[str, str] = {}
    for spec in specs:
        if is_engine(spec):
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


def plan_of(args: argparse.Namespace) -> VerifyPlan:
    """What the run will do, read off the settled options (each typed, else its variable, else the
    default): every policy loaded and checked, so a bad one is bad input before any suite runs."""
    if args.jobs < 1:
        raise OptionError("--jobs", args.jobs, "must be >= 1")
    specs = args.policy or list(BUILTIN_POLICIES)
    isolation = options.isolation(args)
    return VerifyPlan(
        specs=specs, subjects={spec: resolve_policy(spec, isolation) for spec in specs}, impl=args.impl,
        device=args.device, profile=args.profile, max_examples=args.max_examples, seed=args.seed,
        select=args.select, jobs=args.jobs, isolation=isolation,
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Run every property against each policy (or an engine's own code) and report; the exit status."""
    engine = engine_of(args, "verify")  # options typed that do not apply to the engine: refused first
    mode = engine.family.mode if engine is not None else None
    if engine is not None and mode is EngineMode.SUBJECT:  # the release is the policy and the impl
        args.policy = [engine.family.subject_spec(engine.spec)]
        args.impl = args.policy[0]
    args.jobs = min(2, os.cpu_count() or 1) if args.jobs is None else args.jobs
    # Everything the user typed is checked before any suite runs; the outputs first, made absolute
    # before any user module is imported (one that changes the working directory moves nothing).
    files = ReportFiles.checked(json=args.json, junit_xml=args.junit_xml, markdown=args.markdown)
    if files.markdown is not None and (engine is None or mode is EngineMode.SUBJECT):
        require_matplotlib()  # a policy's capacity map; an engine answering in its worker draws none
    if engine is not None and mode is not EngineMode.SUBJECT:  # its properties, or its sizer's property
        report = run_engine(args, engine)
        specs = [engine.spec]
        maps = {engine.spec: "not drawn (an engine answering in its own worker is not a sizing policy)"}
    else:
        plan = plan_of(args)
        specs = plan.specs
        report = verify(plan)
        maps = {}
    interrupted = report.interrupted

    def markdown() -> str:
        assert files.markdown is not None  # called only when the file is asked for
        if interrupted or maps:
            return report.markdown(maps)
        return report.markdown(draw_maps(files.markdown, specs, plan.subjects))

    # Files first: a second Ctrl-C during the table must not lose them.
    files.write(json=report.to_json, junit_xml=report.junit, markdown=markdown)
    # Piped output (CI logs, files) has no terminal width; give the table room instead of 80 columns.
    console = Console(width=None if sys.stdout.isatty() else 200)
    if interrupted:
        console.print("[yellow]interrupted: the report covers what ran before Ctrl-C[/]")
    report.render(console)
    failure = standard_output.current_failure()
    if failure is not None and not interrupted:  # the table was lost: the status says so, and the file
        report.output_error = standard_output.describe(failure)
        files.write(json=report.to_json)  # written again, so its exit_status is the process's
    return report.exit_status


def run_engine(args: argparse.Namespace, engine: Engine) -> VerifyReport:
    """``verify --engine SPEC`` for an engine answering in its own worker: its suite, as one report row."""
    isolation = options.isolation(args)  # --call-timeout bounds each call into the engine's worker
    note = engine.family.obtain(engine.spec, isolation.timeout)  # bad input before any property runs
    suite = engine.family.verify_suite(engine.spec)
    suite = replace(suite, pytest_args=(*suite.pytest_args, *isolation.plugin_args()))
    return engine_verify(engine.spec, suite, profile=args.profile, max_examples=args.max_examples,
                         seed=args.seed, select=args.select, notes=[note] if note else [],
                         call_timeout=isolation.timeout, family=engine.family)  # fmt: skip
