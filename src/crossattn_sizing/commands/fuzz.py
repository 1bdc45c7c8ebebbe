"""``crossattn-sizing fuzz``: run the property suite for a time budget and keep what it finds.

Rounds of the suite run under the ``nightly`` profile (random, example database
on disk) until the budget is spent: ``--minutes`` of wall clock, or
``--max-rounds`` rounds, whichever ends first (a round budget makes a run
independent of how busy the machine is; tests use it). Every new shrunk failure
of a capacity property becomes a regression file in ``properties/regressions/``
that every later run replays, so nothing is lost when the database is wiped or
Hypothesis is upgraded. The time limit ends the run normally; Ctrl-C ends it
with exit status 130. Either way the summary still prints and ``--json`` is
written.
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import io
import math
import signal
import threading
import time
from pathlib import Path
from types import FrameType

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from crossattn_sizing.base import interrupts, settings
from crossattn_sizing.base.errors import OptionError, refuse_spelling
from crossattn_sizing.base.limits import float_arg, int_arg
from crossattn_sizing.base.outcome import Outcome, exit_status
from crossattn_sizing.base.processes import describe_exit
from crossattn_sizing.commands import options
from crossattn_sizing.commands.engines import engine_of
from crossattn_sizing.findings.results import PropertyResult
from crossattn_sizing.fleet.database import check_reachable, redis_url
from crossattn_sizing.runs import profiles
from crossattn_sizing.runs.outputs import ReportFiles, output_dir
from crossattn_sizing.runs.suite import properties_dir, run_suite
from crossattn_sizing.runs.verify_report import PLAIN
from crossattn_sizing.specs.resolve import load_checked_policy

DB_OPTION = options.Option(
    "--db", "example database directory", metavar="DIR", parse=options.path, variable=settings.DB
)
REGRESSIONS = options.Option(
    "--regressions", "new regression files go here", metavar="DIR", parse=options.path,
    variable=settings.REGRESSIONS_DIR,
)  # fmt: skip
REDIS = options.Option(
    "--redis-url", "fleet example database, a Redis URL", metavar="URL", variable=settings.REDIS_URL
)

MAX_MINUTES = 7 * 24 * 60
"""The longest budget accepted (a week): anything longer is a typo, and the timer needs a finite one."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``fuzz``: its options and its help."""
    p = subparsers.add_parser(
        "fuzz",
        help="fuzz the property suite for a time budget (nightly profile)",
        epilog="--seed N: round n uses seed+n-1, and Hypothesis then leaves the example database alone "
        "(without it: random, database used). exit status: 0 every property ran and held; 1 a property "
        "fails; 2 bad input; 3 nothing failed but some property never ran; 130 Ctrl-C",
    )
    p.add_argument("--minutes", type=float_arg, default=10.0,
                   help=f"time budget in minutes, at most {MAX_MINUTES} (default 10)")  # fmt: skip
    p.add_argument("--max-rounds", type=int_arg,
                   help="stop after this many rounds (default: only the time budget)")  # fmt: skip
    options.SEED.add(p, shown_default="random")
    options.POLICY.add(p, shown_default="mrv2", repeatable=True)
    options.IMPL.add(p, shown_default="torch")  # None when not typed: --engine refuses it
    options.DEVICE.add(p, default="cpu")
    options.ENGINE.add(p)
    p.add_argument(
        "--examples-per-round", type=int_arg, default=500,
        help="examples per property per round (default 500)",
    )
    DB_OPTION.add(p, shown_default=profiles.DEFAULT_DB_SHOWN)
    REGRESSIONS.add(p, shown_default="properties/regressions")
    options.SELECT.add(p, default=[], shown_default="every property", repeatable=True)
    options.JSON.add(p)
    options.JOBS.add(p, default=1)
    refuse_spelling(p.add_argument, "--workers", "--jobs")
    REDIS.add(p, shown_default="none")
    p.set_defaults(func=run, parser=p)


class Totals:
    """What all rounds found, per policy and property."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str], PropertyResult] = {}
        self.rounds = 0

    def failing_nodeids(self, policy: str) -> list[str]:
        """Tests already failing for a policy: later rounds skip them, their failure is recorded."""
        failing = [r for (p, _), r in self.by_key.items() if p == policy and r.outcome == Outcome.FAILS]
        return [n for r in failing for n in r.nodeids]

    def add(self, policy: str, results: list[PropertyResult]) -> None:
        """Fold one round's results for ``policy`` into the totals."""
        for r in results:
            self.by_key.setdefault((policy, r.name), PropertyResult(r.name)).merge(r)


HARD_STOP_SIGNAL = signal.SIGUSR1
"""How the budget timer stops a test that overruns: not SIGINT, so it never reads as Ctrl-C."""


def _budget_spent(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # pytest stops the round the way it stops on Ctrl-C


def _hard_stop(deadline: float, grace: float) -> threading.Timer:
    """Interrupt the main thread if one test overruns the deadline by ``grace`` seconds.

    The normal stop is softer: the suite stops between tests once the deadline
    passes. This is for a single test that runs long; the summary still prints
    and the run ends as a spent budget, not as an interrupt.
    """
    signal.signal(HARD_STOP_SIGNAL, _budget_spent)
    timer = threading.Timer(
        max(0.0, deadline + grace - time.monotonic()), _thread.interrupt_main, args=(HARD_STOP_SIGNAL,)
    )
    timer.daemon = True
    timer.start()
    return timer


def check_options(args: argparse.Namespace) -> None:
    """Every option's rule, checked before any work (the CLI turns each into one line, exit 2)."""
    if not math.isfinite(args.minutes) or not 0 < args.minutes <= MAX_MINUTES:
        raise OptionError("--minutes", args.minutes, f"must be a number of minutes in (0, {MAX_MINUTES}]")
    if args.max_rounds is not None and args.max_rounds < 1:
        raise OptionError("--max-rounds", args.max_rounds, "must be >= 1")
    if args.examples_per_round < 1:
        raise OptionError("--examples-per-round", args.examples_per_round, "must be >= 1")
    from crossattn_sizing.runs.fuzz_workers import WORKERS_PER_CORE, max_workers

    if args.jobs > max_workers():
        raise OptionError("--jobs", args.jobs, f"must be <= {max_workers()} on this machine "
                          f"({WORKERS_PER_CORE} per CPU core it may use)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Fuzz each policy in rounds until the time budget is spent; the exit status."""
    from crossattn_sizing.runs.fuzz_workers import die_with_parent

    die_with_parent()  # a fleet worker ends with its parent (nothing for a plain run)
    engine = engine_of(args, "fuzz")  # options that do not apply to the engine: refused first
    if engine is not None and engine.subject is None:  # the engine fuzzes its own way, or says it cannot
        return engine.command("fuzz")(engine.spec, args)
    if engine is not None:  # the release is the policy and the impl (the fleet's workers are told so)
        args.policy, args.impl, args.engine = [engine.subject], engine.subject, None
    args.impl = "torch" if args.impl is None else args.impl
    check_options(args)
    specs = args.policy or ["mrv2"]
    # Outputs first, absolute before a policy's module is imported (a chdir there moves nothing).
    default_regressions = properties_dir() / "regressions"
    files = ReportFiles.checked(args.regressions or default_regressions, json=args.json)
    regressions = output_dir("--regressions", args.regressions or default_regressions)
    assert regressions is not None  # always given a default
    db = output_dir("--db", args.db)
    # The fleet's workers are given these, absolute, where the user gave them.
    args.json, args.db = files.json, db
    args.regressions = regressions if args.regressions else None
    for spec in specs:
        load_checked_policy(spec)
    url = args.redis_url or redis_url()
    if url:
        check_reachable(url)
    if args.jobs > 1:
        check_impl(args)  # found here, not as N workers that died
        return run_fleet(args)
    before = set(regressions.glob("*.json")) if regressions.is_dir() else set()
    totals = Totals()
    console = Console()
    previous_handler = signal.getsignal(HARD_STOP_SIGNAL)
    timer: threading.Timer | None = None
    try:
        check_impl(args)  # before the rounds are set up: bad input is found first
        set_up_rounds(args, db, url)
        deadline = time.monotonic() + args.minutes * 60  # the budget is for fuzzing, not start-up
        timer = _hard_stop(deadline, grace=min(600.0, max(10.0, args.minutes * 6)))
        run_rounds(args, specs, totals, deadline, regressions)
    except KeyboardInterrupt:
        pass  # Ctrl-C (recorded by the handler) or the budget's hard stop: report what ran
    finally:
        if timer is not None:
            timer.cancel()
        signal.signal(HARD_STOP_SIGNAL, previous_handler)
    interrupted = interrupts.requested()
    new_files = sorted(set(regressions.glob("*.json")) - before) if regressions.is_dir() else []
    status = exit_status([r.outcome for r in totals.by_key.values()], interrupted)
    # First, so a second Ctrl-C during the table cannot lose it.
    files.write(json=lambda: summary_json(totals, new_files, interrupted) | {"exit_status": status})
    render(console, totals, new_files, interrupted)
    console.print(f"\nexit status {status}", **PLAIN)
    return status


def set_up_rounds(args: argparse.Namespace, db: Path | None, url: str | None) -> None:
    """The Hypothesis profile every round of this process runs under, on the example database the
    options name (given to it here: this process's environment is left as the user set it)."""
    profiles.register_profiles()
    from hypothesis import Phase, settings

    # No explicit phase: pinned cases replay in every plain run; the fuzzer looks for new ones.
    settings.register_profile(
        "fuzz-round",
        settings.get_profile("nightly"),
        max_examples=args.examples_per_round,
        phases=[Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
        database=profiles.example_database(db, url),
    )


def regression_args(regressions: Path) -> list[str]:
    """The plugin's options that make a round replay and write the regression files in ``regressions``."""
    return ["--regressions", str(regressions), "--record-regressions"]


def check_impl(args: argparse.Namespace) -> None:
    """A bad ``--impl`` or a missing GPU: one line, exit 2, before any round or worker starts."""
    from crossattn_sizing.specs.resolve import load_impl  # imports torch: Ctrl-C often lands here

    load_impl(args.impl, args.device)


def run_rounds(args: argparse.Namespace, specs: list[str], totals: Totals, deadline: float,
               regressions: Path) -> None:  # fmt: skip
    """Rounds of the suite per policy until a budget ends them (or every property of a policy fails).

    Round 1 always starts. Ctrl-C, or the hard stop of a test that overruns,
    arrives as KeyboardInterrupt, raised here or re-raised from pytest's report.
    """
    with Progress(
        TextColumn("[bold]fuzz[/] round {task.fields[round]} {task.description}"),
        BarColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task("", total=args.minutes * 60, round=0)
        live = set(specs)
        # Round 1 always starts (a budget spent during start-up still tests something).
        while live and not interrupts.requested() and (totals.rounds == 0 or time.monotonic() < deadline):
            if args.max_rounds is not None and totals.rounds >= args.max_rounds:
                break
            totals.rounds += 1
            for spec in [s for s in specs if s in live]:
                elapsed = args.minutes * 60 - (deadline - time.monotonic())
                progress.update(task, completed=elapsed, description=spec, round=totals.rounds)
                interrupts.announce(f"fuzz: round {totals.rounds}: policy {spec}")
                seed = None if args.seed is None else args.seed + totals.rounds - 1
                with contextlib.redirect_stdout(io.StringIO()):
                    results, code = run_suite(
                        spec,
                        impl=args.impl,
                        device=args.device,
                        profile="fuzz-round",
                        seed=seed,
                        select=args.select,
                        deselect=totals.failing_nodeids(spec),
                        stop_at=deadline,
                        extra_args=regression_args(regressions),
                    )
                totals.add(spec, results)
                if code == 2:  # pytest's INTERRUPTED: the time budget or Ctrl-C stopped the round
                    raise KeyboardInterrupt
                if code == 5:  # nothing left to run: every property already fails for this policy
                    live.discard(spec)


def render(console: Console, totals: Totals, new_files: list[Path], interrupted: bool) -> None:
    """Print the summary table: one line per policy and property, with the regression files written."""
    stopped = " (interrupted: stopped early by Ctrl-C)" if interrupted else ""
    table = Table(title=f"fuzz summary: {totals.rounds} round(s){stopped}")
    for col in ("policy", "property", "examples", "outcome", "best target()"):
        table.add_column(col, overflow="fold")
    for (policy, name), r in sorted(totals.by_key.items()):
        targets = ", ".join(f"{v:g}" for v in r.best_targets.values()) or "-"
        color = {Outcome.FAILS: "red", Outcome.HOLDS: "green"}.get(r.outcome, "yellow")
        table.add_row(policy, name, str(r.examples), f"[{color}]{r.outcome}[/]", targets)
    console.print(table)
    replayed = sum(r.replayed for r in totals.by_key.values())
    if replayed:
        console.print(f"{replayed} failure(s) replayed from the example database "
                      "(found earlier, or by another worker sharing it)")
    for (policy, name), r in sorted(totals.by_key.items()):
        if r.events:
            console.print(f"\nregimes hit, {policy} / {name} (event(): examples)")
            for event, n in sorted(r.events.items(), key=lambda x: -x[1]):
                console.print(f"  {n:>7}  {event}", markup=False, highlight=False)
    for (policy, name), r in sorted(totals.by_key.items()):
        if r.outcome == Outcome.FAILS:
            console.print(f"\n[bold]{policy} / {name}[/] fails:")
            console.print(r.diagnosis.removeprefix("AssertionError: "), **PLAIN)
            for line in r.replay_lines():
                console.print(line, **PLAIN)
    if new_files:
        console.print("\nnew regression files (replayed by every run from now on):")
        for f in new_files:
            console.print(f"  {f}", **PLAIN)
    else:
        console.print("\nno new regression files")


def summary_json(totals: Totals, new_files: list[Path], interrupted: bool) -> dict:
    """The summary as ``fuzz --json`` writes it (a fleet adds its workers' up)."""
    return {
        "rounds": totals.rounds,
        "interrupted": interrupted,
        "properties": [
            {
                "policy": policy,
                "property": name,
                "examples": r.examples,
                "outcome": r.outcome,
                "events": r.events,
                "best_targets": r.best_targets,
                "replayed_from_database": r.replayed,
                "diagnosis": r.diagnosis,
            }
            for (policy, name), r in sorted(totals.by_key.items())
        ],
        "new_regressions": [str(f) for f in new_files],
    }


def run_fleet(args: argparse.Namespace) -> int:
    """``--jobs N``: run the fleet (:mod:`crossattn_sizing.runs.fuzz_workers`), then merge, print
    and judge the workers' summaries as one run's."""
    from crossattn_sizing.runs.fuzz_workers import run_workers

    fleet = run_workers(args.parser, args)
    console = Console()
    totals = Totals()
    new_files: set[Path] = set()
    interrupted = fleet.interrupted
    for data in fleet.summaries:
        add_summary(totals, data)
        new_files.update(Path(f) for f in data.get("new_regressions", []))
        interrupted = interrupted or bool(data.get("interrupted"))
    dead = fleet.dead
    render(console, totals, sorted(new_files), interrupted or bool(dead))
    for w in dead:
        console.print(f"\n[red]worker {w.index} (pid {w.pid}) died with {describe_exit(w.proc.returncode)}"
                      "[/]; what it had found is in the example database; its log ended: "
                      f"{escape(w.log_tail())}")
    workers = [
        {"index": w.index, "pid": w.pid, "exit_status": w.proc.returncode, "log_tail": w.log_tail(),
         "died": w in dead}
        for w in fleet.workers
    ]
    # args.json: checked and made absolute by run().
    ReportFiles(json=args.json).write(
        json=lambda: summary_json(totals, sorted(new_files), interrupted or bool(dead)) | {"workers": workers}
    )
    # The fleet's order: a failure any worker found outranks Ctrl-C, and a dead worker leaves the run
    # incomplete whatever the others ran (a property it never reached is not "not run" in its summary).
    if any(r.outcome == Outcome.FAILS for r in totals.by_key.values()):
        return exit_status([Outcome.FAILS])
    return exit_status([Outcome.NOT_RUN] if dead else [Outcome.HOLDS], interrupted and not dead)


def add_summary(totals: Totals, data: dict) -> None:
    """Fold one worker's JSON summary (``fuzz --json``) into the parent's totals."""
    totals.rounds += int(data.get("rounds", 0))
    for p in data.get("properties", []):
        result = PropertyResult(p["property"], outcome=p["outcome"], diagnosis=p.get("diagnosis", ""))
        result.examples = int(p.get("examples", 0))
        result.events = dict(p.get("events", {}))
        result.best_targets = dict(p.get("best_targets", {}))
        result.replayed = int(p.get("replayed_from_database", 0))
        totals.add(p["policy"], [result])
