"""``crossattn-sizing prove``: check the coverage invariant on every config of a bounded domain.

With no domain option the domain is :func:`crossattn_sizing.prove.edges.edge_domain`:
dense around every width edge and out to 2M-token contexts, small enough that
a user's ``module:attr`` policy, called once per config, is checked in seconds.
Any domain option switches to the grid those options describe (the others
keep the grid defaults below).

Exit status: 0 when the invariant holds on the whole domain, 1 when there are
counterexamples, 2 for bad arguments (a :class:`~crossattn_sizing.base.errors.HarnessError`
the CLI prints as one line; a policy that cannot answer some config of the
domain is one too, naming the config), 3 when the policy could not be asked about any
config of the domain (an engine that cannot represent it: nothing judged),
130 on Ctrl-C. Configs an engine cannot represent are counted as not judged. A domain larger than
:data:`MAX_DOMAIN_SIZE` is refused unless ``--force`` says it is meant.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NamedTuple

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from crossattn_sizing.base.errors import JudgedFailure, OptionError, PolicyCallError, refuse_spelling, shown
from crossattn_sizing.base.limits import MAX_INT_DIGITS, too_long
from crossattn_sizing.base.outcome import EXIT_INTERRUPTED, Outcome, exit_status
from crossattn_sizing.commands import options
from crossattn_sizing.core.check_line import check_line
from crossattn_sizing.core.policies import policy_name
from crossattn_sizing.prove import (
    DEFAULT_CHUNK_SIZE,
    Counterexample,
    Domain,
    DomainError,
    PolicyRaised,
    ProveResult,
    batch_method,
    edges,
    prove_all,
    vector_form,
)
from crossattn_sizing.prove.batches import BatchDisagrees
from crossattn_sizing.prove.edges import edge_coverage, edge_domain
from crossattn_sizing.prove.verify_row import stopped_on
from crossattn_sizing.runs.outputs import check_outputs, output_file, write_json
from crossattn_sizing.specs.resolve import load_checked_policy


class Axis(NamedTuple):
    """One axis of the grid: its :meth:`Domain.parse` keyword, its option, its grid default, its help."""

    key: str
    option: str  # one spelling per quantity (docs/spec.md §1), taking a LIST here
    default: str  # the grid's, used where some other domain option is given
    what: str


AXES = (
    Axis("block_sizes", "--block-size", "1-512", "bs, manager"),
    Axis("kernel_block_sizes", "--kernel-block-size", "all",
         "kernel block sizes, kept where they divide bs; 'all' = every divisor"),
    Axis("dcp_sizes", "--dcp", "1", "DCP sizes; C > 1 adds every interleave dividing kbs"),
    # Odd steps so the values fall on both sides of block-size multiples.
    Axis("max_model_lens", "--max-model-len", "1-4096:63", "M"),
    Axis("encoder_budgets", "--encoder-budget", "1-8192:63", "E"),
    Axis("source_positions", "--source-positions", "absent,0,448,1500,2048",
         "S; 'absent' = the config has no max_source_positions"),
)  # fmt: skip
DEFAULTS = {axis.key: axis.default for axis in AXES}
RETIRED = {"--block-sizes": "--block-size", "--kernel-block-sizes": "--kernel-block-size",
           "--encoder-tokens": "--encoder-budget"}  # fmt: skip

MAX_DOMAIN_SIZE = 10**10
"""The largest domain checked without ``--force``: about 70 times the old default grid, minutes
vectorised; past it a typo (a range of 1e18) would start a run that never ends."""

_COLUMNS = ("bs", "kbs", "C", "I", "M", "E", "S", "B", "e", "needed", "allocated", "given")


def register(subparsers: Any) -> None:
    """Add the ``prove`` subcommand."""
    p = subparsers.add_parser(
        "prove",
        help="check the coverage invariant on every config of a bounded domain (vectorised)",
        description=(
            "Check cdiv(e, kbs*C) <= W and cdiv(e, bs*C)*bpk <= W for one DCP-sharded "
            "cross-attention group on every config of the product of the options below. "
            "LIST is comma-separated N, LO-HI or LO-HI:STEP items. B = max(M, E), the smallest "
            "max_num_batched_tokens the engine accepts that admits E, so e = E. "
            "Exit 0: holds; 1: counterexamples; 2: bad arguments; 3: nothing could be judged; 130: Ctrl-C."
        ),
    )
    options.POLICY.add(p, required=True)
    options.add_isolation(p)
    for axis in AXES:
        p.add_argument(
            axis.option,
            dest=axis.key,
            metavar="LIST",
            help=f"{axis.what} (grid default {axis.default}; any of these options replaces the edge domain)",
        )
    for old, new in RETIRED.items():
        refuse_spelling(p.add_argument, old, new)
    p.add_argument("--examples", default="5", metavar="N", help="counterexamples to show (%(default)s)")
    p.add_argument(
        "--chunk-size",
        default=str(DEFAULT_CHUNK_SIZE),
        metavar="N",
        help="(M, E, S) combinations decoded at once, ~150 bytes each (%(default)s)",
    )
    options.JSON.add(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--dry-run", action="store_true", help="print the domain and its size; check nothing")
    p.add_argument("--force", action="store_true",
                   help=f"check a domain larger than {MAX_DOMAIN_SIZE:,} configs")  # fmt: skip
    p.add_argument("--symbolic", action="store_true",
                   help="prove coverage for ALL configs with the z3 solver (built-in policies, vllm==X, "
                   "vllm@PATH; needs the 'prove' extra), or give a model check replays")  # fmt: skip
    p.set_defaults(func=run)


MAX_EXAMPLES = 10_000
"""Counterexamples kept and shown: each is a row of the table and of ``--json``."""
MAX_CHUNK_SIZE = 2**24
"""(M, E, S) combinations decoded at once: about 150 bytes each, so 2.5 GB at the bound."""


def _int_option(text: str, option: str, minimum: int, maximum: int) -> int:
    rule = f"must be an integer >= {minimum}"
    if too_long(text):
        raise DomainError(f"{option} {shown(text)}: must be an integer of at most {MAX_INT_DIGITS} digits")
    try:
        value = int(text)
    except ValueError:
        raise DomainError(f"{option} {shown(text)}: {rule}") from None
    if value < minimum:
        raise DomainError(f"{option} {text!r}: {rule}")
    if value > maximum:
        raise DomainError(f"{option} {text!r}: must be an integer <= {maximum}")
    return value


def _table(examples: list[Counterexample]) -> list[str]:
    rows = [
        [
            c.block_size,
            c.kernel_block_size,
            c.dcp_size,
            c.dcp_interleave,
            c.max_model_len,
            c.max_num_encoder_input_tokens,
            "absent" if c.max_source_positions is None else c.max_source_positions,
            c.max_num_batched_tokens,
            c.encoder_len,
            c.entries_needed,
            c.entries_allocated,
            c.entries_given,
        ]
        for c in examples
    ]
    cells = [list(_COLUMNS)] + [[str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(_COLUMNS))]
    return ["  " + "  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) for row in cells]


def _report(result: ProveResult, size: int) -> None:
    rate = result.configs / result.seconds if result.seconds > 0 else float("inf")
    timing = f"{result.seconds:.2f} s, {rate:.3g} configs/s, {result.method}"
    share = 100 * result.configs / size
    print(f"covered: {result.configs:,} of the domain's {size:,} configs ({share:.0f}%)")
    if result.not_judged:
        print(f"not judged: {result.not_judged:,} configs the policy's engine cannot represent "
              f"(no verdict either way); judged: {result.judged:,}")  # fmt: skip
    if result.judged == 0:
        print(f"{result.policy}: NOT RUN: no config of the domain could be judged ({timing})")
        return
    if result.holds:
        where = "the whole domain" if not result.not_judged else "every judged config"
        print(f"{result.policy}: holds on {where}: {result.judged:,} configs checked ({timing})")
        return
    print(f"{result.policy}: FAILS on {result.failures:,} of {result.judged:,} configs checked ({timing})")
    if result.counterexamples:
        print(
            f"first {len(result.counterexamples)} counterexamples in (bs, kbs, C, I, M, E, S) order "
            "(entries needed / allocated vs the row's given width):"
        )
        print("\n".join(_table(result.counterexamples)))


def describe_edges(domains: list[Domain]) -> dict[str, str]:
    """The edge domain's axes, one line each, and how many width edges it holds."""
    e_sizes = [d.encoder_budgets.size for d in domains]
    return {
        "parts": f"{len(domains)}: one per (bs, C), bs in {edges.BLOCK_SIZES}, C in {edges.DCP_SIZES}",
        "kbs": "bs and one smaller kernel block (16, or bs/2); I = 1 (the width formulas never read it)",
        "M": f"{len(edges.MODEL_LENS)} values in {edges.MODEL_LENS[0]}..{edges.MODEL_LENS[-1]}: "
        "2^j, 2^j+1, 3*2^(j-1), and configured lengths",
        "E": f"{min(e_sizes)}..{max(e_sizes)} values per part in 1..{edges.MAX_TOKENS}: every "
        f"k*unit-1..k*unit+1 for k <= {edges.DENSE_MULTIPLES}, then 2 multiples per octave; 2^j+-1",
        "S": "absent, 0, 448, 1500, 4096, 1048576",
        "B": "max(M, E): the smallest B the engine accepts that admits E, so e = E",
        "edges": edge_coverage(domains).describe(),
    }


def run(args: argparse.Namespace) -> int:
    """Parse the domain, run :func:`prove`, print the report; the exit status says whether it holds."""
    if args.symbolic:
        from crossattn_sizing.commands.prove_symbolic import run_symbolic

        bounded = {axis.key: (axis.option, None) for axis in AXES} | {
            "examples": ("--examples", "5"), "chunk_size": ("--chunk-size", str(DEFAULT_CHUNK_SIZE)),
            "dry_run": ("--dry-run", False), "force": ("--force", False)}  # fmt: skip
        return run_symbolic(args, bounded)
    examples = _int_option(args.examples, "--examples", 0, MAX_EXAMPLES)
    chunk_size = _int_option(args.chunk_size, "--chunk-size", 1, MAX_CHUNK_SIZE)
    given = {key: getattr(args, key) for key in DEFAULTS if getattr(args, key) is not None}
    if given:
        grid = Domain.parse(**(DEFAULTS | given))
        domains, described = [grid], grid.describe()
    else:
        domains = edge_domain()
        described = describe_edges(domains)
    check_outputs({"--json": args.json})
    json_path = output_file("--json", args.json)  # absolute before the policy's module is imported
    isolation = options.isolation(args)
    policy = load_checked_policy(args.policy, isolation)
    if isolation.note:
        print(f"note: {isolation.note}", file=sys.stderr)
    size = sum(d.size for d in domains)
    print(f"domain: {size:,} configs" + ("" if given else f" (edge domain, {len(domains)} parts)"))
    for axis, text in described.items():
        print(f"  {axis}: {text}")
    if args.dry_run:
        return 0
    if size > MAX_DOMAIN_SIZE and not args.force:
        raise OptionError(
            "domain", f"of {size:.3g} configs",
            f"is larger than {MAX_DOMAIN_SIZE:.0e}: narrow --block-size/--max-model-len/--encoder-budget "
            "(LO-HI:STEP) or pass --force",
        )
    err = Console(stderr=True)
    if vector_form(policy) is None:
        how = "asking it in batches (widths_many)" if batch_method(policy) else "calling it once per config"
        print(
            f"note: policy {policy_name(policy)} has no vectorised form; {how} ({size:,} configs)",
            file=sys.stderr,
        )
    asked = DEFAULTS | given if given else {"domain": "edges"}
    domain_info = {"options": asked, "axes": described, "configs": size}
    quiet = args.no_progress or not err.is_terminal
    checked = [0]  # configs done so far, for a partial result
    try:
        result = _run_prove(domains, policy, examples, chunk_size, size, quiet, checked)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the partial result says what was checked, as interrupted
        if json_path:
            payload = {"policy": policy_name(policy), "holds": False, "verdict": Outcome.INTERRUPTED.value,
                       "interrupted": True, "exit_status": EXIT_INTERRUPTED, "configs_checked": checked[0],
                       "domain": domain_info}  # fmt: skip
            write_json(json_path, payload)
        raise
    except PolicyRaised as exc:
        if not isinstance(exc.error, (BatchDisagrees, JudgedFailure)):
            raise _stopped(args, policy, exc, json_path, domain_info) from None
        # Two answers for one config: the policy fails, whichever of them a sweep would have judged. An
        # engine's sizing that ended its worker or did not answer within the deadline fails that config.
        print(f"FAILS: {exc.error}\n  replay the single call: "
              f"{check_line(args.policy, exc.config, [exc.config.encoder_budget])}")
        if json_path:
            payload = {"policy": policy_name(policy), "holds": False, "verdict": Outcome.FAILS.value,
                       "error": str(exc.error), "raised_on": exc.config.to_dict(), "domain": domain_info}
            write_json(json_path, payload)
        return exit_status([Outcome.FAILS])
    except PolicyCallError as exc:
        raise _stopped(args, policy, exc, json_path, domain_info) from None
    _report(result, size)
    if json_path:
        payload = result.to_dict() | {"domain": domain_info}
        write_json(json_path, payload)
        print(f"wrote {json_path}", file=sys.stderr)
    return exit_status([result.outcome])


def _run_prove(
    domains: list[Domain], policy: Any, examples: int, chunk_size: int, size: int, quiet: bool,
    checked: list[int],
) -> ProveResult:  # fmt: skip
    """:func:`prove_all` under a progress bar on stderr (none when ``quiet``); ``checked[0]`` counts."""
    with Progress(
        TextColumn("prove"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=quiet,
    ) as bar:
        task = bar.add_task("prove", total=size)

        def progress(n: int) -> None:
            bar.advance(task, n)
            checked[0] += n

        return prove_all(
            domains,
            policy,
            examples=examples,
            chunk_size=chunk_size,
            progress=progress,
        )


def _stopped(args: argparse.Namespace, policy: Any, exc: Exception, json_path: Path | None,
             domain_info: dict[str, Any]) -> PolicyCallError:  # fmt: skip
    """The policy could not answer one config: bad input (the error to raise), the config in ``--json``."""
    error = stopped_on(args.policy, exc) if isinstance(exc, PolicyRaised) else exc
    if json_path:  # what stopped it, with the config, for a caller reading the file
        payload = {"policy": policy_name(policy), "holds": False, "verdict": "bad input",
                   "error": str(error), "domain": domain_info}  # fmt: skip
        if isinstance(exc, PolicyRaised):
            payload["raised_on"] = exc.config.to_dict()
        write_json(json_path, payload)
    return error  # type: ignore[return-value]
