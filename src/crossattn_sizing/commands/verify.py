"""``crossattn-sizing verify``: the main job. Every property against each chosen policy.

Prints a policy x property verdict table, each failure with its shrunk
counterexample, diagnosis and reproduce command, then any findings. Exits
non-zero exactly when a policy expected to hold fails: the pre-fix sizing
failing is the harness working, not a failed run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from crossattn_sizing.errors import HarnessError
from crossattn_sizing.policies import BUILTIN_POLICIES, load_policy, policy_name
from crossattn_sizing.profiles import PROFILES
from crossattn_sizing.report import Finding, PolicyVerdict, VerifyReport
from crossattn_sizing.suite import run_suite


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "verify", help="run every property against each sizing policy and report verdicts"
    )
    p.add_argument(
        "--policy",
        action="append",
        help="policy to verify (built-in name or module:attr); repeatable; default: every built-in",
    )
    p.add_argument("--impl", default="torch", help="implementation under test: torch, triton or module:attr")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument(
        "--profile", default="ci", choices=PROFILES, help="Hypothesis settings profile (default ci)"
    )
    p.add_argument("--max-examples", type=int, help="override the profile's examples per property")
    p.add_argument("--seed", type=int, help="Hypothesis seed (profiles other than ci are random without it)")
    p.add_argument(
        "-k", dest="select", action="append", default=[], help="only properties matching (pytest -k)"
    )
    p.add_argument("--json", type=Path, help="write the report as JSON to this file")
    p.add_argument("--junit-xml", type=Path, help="write the report as JUnit XML to this file")
    p.set_defaults(func=run)


def expected_to_hold(spec: str) -> bool:
    """Built-ins say; a user's own policy is expected to hold (that is what they are asking)."""
    builtin = BUILTIN_POLICIES.get(spec)
    if builtin is None:  # an engine release (vllm==X) knows whether it predates the fix
        return bool(getattr(load_policy(spec), "expected_to_hold", True))
    return builtin.expected_to_hold


def _profile(name: str, max_examples: int | None) -> str:
    """The profile to run: the named one, or a child of it with the example budget changed."""
    if max_examples is None:
        return name
    if max_examples < 1:
        raise HarnessError(f"--max-examples={max_examples}: must be >= 1")
    from hypothesis import settings

    from crossattn_sizing import profiles

    profiles.register_profiles()
    child = f"{name}-x{max_examples}"
    settings.register_profile(child, settings.get_profile(name), max_examples=max_examples)
    return child


def collect_findings() -> list[Finding]:
    """Findings the implementation models (e.g. the DCP cross-attention write path)."""
    try:
        from crossattn_sizing import findings
    except ImportError:  # the implementation extra is not installed: nothing to report
        return []
    return [Finding(f.title, f.detail) for f in findings.all_findings()]


def run(args: argparse.Namespace) -> int:
    specs = args.policy or list(BUILTIN_POLICIES)
    for spec in specs:  # fail fast, before any suite runs, on a policy that does not load
        load_policy(spec)
    profile = _profile(args.profile, args.max_examples)
    # Piped output (CI logs, files) has no terminal width; give the table room instead of 80 columns.
    console = Console(width=None if sys.stdout.isatty() else 200)
    verdicts: list[PolicyVerdict] = []
    interrupted = False
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        overall = progress.add_task("policies", total=len(specs))
        for spec in specs:
            task = progress.add_task(f"{spec}", total=None)

            def on_progress(done: int, total: int, nodeid: str, task=task, spec=spec) -> None:  # type: ignore[no-untyped-def]
                name = nodeid.split("::")[-1]
                progress.update(task, completed=done, total=total, description=f"{spec}: {name}")

            # Hypothesis and pytest print to stdout as they go; the report below says it all once.
            with contextlib.redirect_stdout(io.StringIO()):
                results, code = run_suite(
                    spec,
                    impl=args.impl,
                    device=args.device,
                    profile=profile,
                    seed=args.seed,
                    select=args.select,
                    on_progress=on_progress,
                )
            verdicts.append(PolicyVerdict(policy_name(load_policy(spec)), expected_to_hold(spec), results))
            progress.remove_task(task)
            progress.advance(overall)
            if code == 2:  # Ctrl-C inside pytest: report what ran, then stop
                interrupted = True
                break
    report = VerifyReport(args.profile, args.impl, args.device, args.seed, verdicts, collect_findings())
    if interrupted:
        console.print("[yellow]interrupted: the report covers the policies that ran[/]")
    report.render(console)
    if args.json:
        report.write_json(args.json)
    if args.junit_xml:
        report.write_junit(args.junit_xml)
    return 130 if interrupted else report.exit_status
