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

from crossattn_sizing import interrupts
from crossattn_sizing.edges import edge_domain
from crossattn_sizing.errors import OptionError
from crossattn_sizing.limits import check_seed, int_arg
from crossattn_sizing.outputs import check_outputs, output_file
from crossattn_sizing.policies import BUILTIN_POLICIES, load_checked_policy, load_policy, policy_name
from crossattn_sizing.profiles import PROFILES
from crossattn_sizing.proof import NAME as PROVE_ROW
from crossattn_sizing.proof import prove_property
from crossattn_sizing.report import Finding, PolicyVerdict, VerifyReport
from crossattn_sizing.suite import run_suite


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "verify",
        help="run every property against each sizing policy and report verdicts",
        epilog="exit status: 0 every policy ran and those expected to hold hold; 1 one of them fails; "
        "2 bad input; 3 nothing failed but something did not run; 130 Ctrl-C",
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
    p.add_argument("--max-examples", type=int_arg, help="override the profile's examples per property")
    p.add_argument("--seed", type=int_arg,
                   help="Hypothesis seed, 0..2**64-1 (profiles other than ci are random without it)")
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
        raise OptionError("--max-examples", max_examples, "must be >= 1")
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


def check_impl(spec: str, device: str) -> None:
    """Build the implementation once up front: a bad ``--impl`` or a missing GPU is one line, exit 2."""
    from crossattn_sizing.impl import load_impl, provenance_lines

    for line in provenance_lines(load_impl(spec, device)):  # whose kernels the verdicts are about
        print(f"impl {spec}: {line}")


def run(args: argparse.Namespace) -> int:
    specs = args.policy or list(BUILTIN_POLICIES)
    check_seed("--seed", args.seed)
    # Everything the user typed is checked before any suite runs.
    names = {spec: policy_name(load_checked_policy(spec)) for spec in specs}
    check_outputs({"--json": args.json, "--junit-xml": args.junit_xml})
    json_path = output_file("--json", args.json)
    junit_path = output_file("--junit-xml", args.junit_xml)
    profile = _profile(args.profile, args.max_examples)
    verdicts: list[PolicyVerdict] = []
    try:
        check_impl(args.impl, args.device)  # imports torch: Ctrl-C often lands here
        interrupted = run_policies(args, specs, names, profile, verdicts)
    except KeyboardInterrupt:  # outside pytest (which reports its own): between or before suites
        interrupted = True
    # Policies the interrupt kept from running are listed, as not run, never as holding.
    verdicts += [PolicyVerdict(names[s], expected_to_hold(s), []) for s in specs[len(verdicts) :]]
    # No new work after Ctrl-C (the findings search imports torch and runs Hypothesis).
    findings = [] if interrupted else collect_findings()
    report = VerifyReport(args.profile, args.impl, args.device, args.seed, verdicts, findings, interrupted)
    # Files first: a second Ctrl-C during the table must not lose them.
    if json_path:
        report.write_json(json_path)
    if junit_path:
        report.write_junit(junit_path)
    # Piped output (CI logs, files) has no terminal width; give the table room instead of 80 columns.
    console = Console(width=None if sys.stdout.isatty() else 200)
    if interrupted:
        console.print("[yellow]interrupted: the report covers what ran before Ctrl-C[/]")
    report.render(console)
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


def run_policies(
    args: argparse.Namespace, specs: list[str], names: dict[str, str], profile: str,
    verdicts: list[PolicyVerdict],
) -> bool:  # fmt: skip
    """Run the suite for each policy in turn, appending its verdict; True when Ctrl-C stopped it.

    A KeyboardInterrupt that escapes (raised outside pytest) reaches :func:`run`,
    with the policy in progress already recorded as interrupted.
    """
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
            if interrupts.requested():
                return True
            # Interrupted until its suite reports: a Ctrl-C landing anywhere from here on
            # (start-up, imports, between tests) leaves this policy marked as interrupted.
            verdicts.append(PolicyVerdict(names[spec], expected_to_hold(spec), [], interrupted=True))
            interrupts.announce(f"verify: policy {spec}: running the property suite")
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
            interrupted = code == 2 or interrupts.requested()  # Ctrl-C inside pytest
            if not interrupted and wants_prove(args.select):
                # Beside the sampled properties, the exhaustive check on the edge domain.
                parts = edge_domain()
                progress.update(task, description=f"{spec}: prove on the edge domain", completed=0,
                                total=sum(p.size for p in parts))  # fmt: skip
                results.append(prove_property(
                    load_checked_policy(spec), spec, parts, lambda n, task=task: progress.advance(task, n)
                ))  # fmt: skip
            expected = expected_to_hold(spec)
            verdicts[-1] = PolicyVerdict(names[spec], expected, results, interrupted=interrupted)
            progress.remove_task(task)
            progress.advance(overall)
            if interrupted:  # report what ran, then stop
                return True
    return False
