"""``crossattn-sizing fuzz``: run the property suite for a time budget and keep what it finds.

Rounds of the suite run under the ``nightly`` profile (random, example database
on disk) until the budget is spent. Every new shrunk failure of a capacity
property becomes a regression file in ``properties/regressions/`` that every
later run replays, so nothing is lost when the database is wiped or Hypothesis
is upgraded. Ctrl-C or the time limit ends the run early and the summary still
prints.
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import io
import json
import os
import threading
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from crossattn_sizing import profiles
from crossattn_sizing.errors import HarnessError
from crossattn_sizing.fleet.database import REDIS_URL_ENV, check_reachable, redis_url
from crossattn_sizing.policies import load_policy
from crossattn_sizing.report import PLAIN
from crossattn_sizing.suite import PropertyResult, properties_dir, run_suite


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("fuzz", help="fuzz the property suite for a time budget (nightly profile)")
    p.add_argument("--minutes", type=float, default=10.0, help="time budget in minutes (default 10)")
    p.add_argument("--policy", action="append", help="policy to fuzz (repeatable; default mrv2)")
    p.add_argument("--impl", default="torch")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument(
        "--examples-per-round", type=int, default=500, help="examples per property per round (default 500)"
    )
    p.add_argument("--db", type=Path, help=f"example database directory (default ${profiles.DB_ENV})")
    p.add_argument(
        "--regressions", type=Path, help="new regression files go here (default properties/regressions)"
    )
    p.add_argument(
        "-k", dest="select", action="append", default=[], help="only properties matching (pytest -k)"
    )
    p.add_argument("--json", type=Path, help="write the summary as JSON")
    p.add_argument("--workers", type=int, default=1,
                   help="fuzzing processes sharing the example database (default 1; see --redis-url)")
    p.add_argument("--redis-url", help=f"fleet example database, a Redis URL (default ${REDIS_URL_ENV})")
    p.set_defaults(func=run, parser=p)


class Totals:
    """What all rounds found, per policy and property."""

    def __init__(self) -> None:
        self.by_key: dict[tuple[str, str], PropertyResult] = {}
        self.rounds = 0

    def failing_nodeids(self, policy: str) -> list[str]:
        """Tests already failing for a policy: later rounds skip them, their failure is recorded."""
        failing = [r for (p, _), r in self.by_key.items() if p == policy and r.outcome == "fails"]
        return [n for r in failing for n in r.nodeids]

    def add(self, policy: str, results: list[PropertyResult]) -> None:
        for r in results:
            self.by_key.setdefault((policy, r.name), PropertyResult(r.name)).merge(r)


def _hard_stop(deadline: float, grace: float) -> threading.Timer:
    """Interrupt the main thread if one test overruns the deadline by ``grace`` seconds.

    The normal stop is softer: the suite stops between tests once the deadline
    passes. This is for a single test that runs long; it acts as Ctrl-C would,
    and the summary still prints.
    """
    timer = threading.Timer(max(0.0, deadline + grace - time.monotonic()), _thread.interrupt_main)
    timer.daemon = True
    timer.start()
    return timer


def run(args: argparse.Namespace) -> int:
    if args.minutes <= 0:
        raise HarnessError(f"--minutes={args.minutes}: must be > 0")
    if args.examples_per_round < 1:
        raise HarnessError(f"--examples-per-round={args.examples_per_round}: must be >= 1")
    if args.workers < 1:
        raise HarnessError(f"--workers={args.workers}: must be >= 1")
    specs = args.policy or ["mrv2"]
    for spec in specs:
        load_policy(spec)
    if args.redis_url:
        os.environ[REDIS_URL_ENV] = args.redis_url
    if redis_url():
        check_reachable(redis_url())  # type: ignore[arg-type]
    if args.workers > 1:
        from crossattn_sizing.fleet.workers import run_workers

        return run_workers(args.parser, args)
    regressions = args.regressions or properties_dir() / "regressions"
    os.environ["CROSSATTN_REGRESSIONS_DIR"] = str(regressions)
    os.environ["CROSSATTN_RECORD_REGRESSIONS"] = "1"
    if args.db:
        os.environ[profiles.DB_ENV] = str(args.db)
    profiles.register_profiles()  # re-read the database location
    from hypothesis import Phase, settings

    # No explicit phase: pinned cases replay in every plain run; the fuzzer looks for new ones.
    settings.register_profile(
        "fuzz-round",
        settings.get_profile("nightly"),
        max_examples=args.examples_per_round,
        phases=[Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    )
    before = set(regressions.glob("*.json")) if regressions.is_dir() else set()
    totals = Totals()
    console = Console()
    deadline = time.monotonic() + args.minutes * 60
    timer = _hard_stop(deadline, grace=max(10.0, args.minutes * 6))
    interrupted = False
    try:
        with Progress(
            TextColumn("[bold]fuzz[/] round {task.fields[round]} {task.description}"),
            BarColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        ) as progress:
            task = progress.add_task("", total=args.minutes * 60, round=0)
            live = set(specs)
            while time.monotonic() < deadline:
                totals.rounds += 1
                for spec in [s for s in specs if s in live]:
                    elapsed = args.minutes * 60 - (deadline - time.monotonic())
                    progress.update(task, completed=elapsed, description=spec, round=totals.rounds)
                    with contextlib.redirect_stdout(io.StringIO()):
                        results, code = run_suite(
                            spec,
                            impl=args.impl,
                            device=args.device,
                            profile="fuzz-round",
                            select=args.select,
                            deselect=totals.failing_nodeids(spec),
                            stop_at=deadline,
                        )
                    totals.add(spec, results)
                    if code == 2:  # pytest's INTERRUPTED: the time budget or Ctrl-C stopped the round
                        raise KeyboardInterrupt
                    if code == 5:  # nothing left to run: every property already fails for this policy
                        live.discard(spec)
                if not live:
                    break
    except KeyboardInterrupt:
        interrupted = time.monotonic() < deadline  # Ctrl-C; a spent budget is the normal end
    finally:
        timer.cancel()
    new_files = sorted(set(regressions.glob("*.json")) - before) if regressions.is_dir() else []
    render(console, totals, new_files, interrupted)
    if args.json:
        args.json.write_text(json.dumps(summary_json(totals, new_files, interrupted), indent=2) + "\n")
    return 1 if any(r.outcome == "fails" for r in totals.by_key.values()) else 0


def render(console: Console, totals: Totals, new_files: list[Path], interrupted: bool) -> None:
    stopped = " (stopped early)" if interrupted else ""
    table = Table(title=f"fuzz summary: {totals.rounds} round(s){stopped}")
    for col in ("policy", "property", "examples", "outcome", "best target()"):
        table.add_column(col, overflow="fold")
    for (policy, name), r in sorted(totals.by_key.items()):
        targets = ", ".join(f"{v:g}" for v in r.best_targets.values()) or "-"
        color = "red" if r.outcome == "fails" else "green"
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
        if r.outcome == "fails":
            console.print(f"\n[bold]{policy} / {name}[/] fails:")
            console.print(r.diagnosis.removeprefix("AssertionError: "), **PLAIN)
    if new_files:
        console.print("\nnew regression files (replayed by every run from now on):")
        for f in new_files:
            console.print(f"  {f}", **PLAIN)
    else:
        console.print("\nno new regression files")


def summary_json(totals: Totals, new_files: list[Path], interrupted: bool) -> dict:  # type: ignore[type-arg]
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
