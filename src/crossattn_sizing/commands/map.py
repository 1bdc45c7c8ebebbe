"""``crossattn-sizing map``: draw the capacity map of one or more policies (PNG or SVG).

One panel per policy and block size, side by side, so the pre-fix sizing and
the fix are compared at a glance (:mod:`crossattn_sizing.findings.capacity_map`).
Bad input (an unknown policy, a block size that is not a positive integer, an
``--out`` that is not ``.png``/``.svg`` or cannot be written, matplotlib not
installed) is one line and exit 2, checked before anything is drawn.
"""

from __future__ import annotations

import argparse

from crossattn_sizing.base.errors import HarnessError
from crossattn_sizing.commands import options
from crossattn_sizing.commands.engines import engine_of
from crossattn_sizing.findings.capacity_map import FORMATS, check_out, draw, require_matplotlib
from crossattn_sizing.runs.outputs import output_file
from crossattn_sizing.specs.resolve import load_checked_policy

DEFAULT_BLOCK_SIZE = 16


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``map``: its options and its help."""
    p = subparsers.add_parser(
        "map",
        help="draw max_model_len against encoder tokens: where each policy's cross rows cover or overflow",
        epilog="exit status: 0 drawn; 2 bad input (unknown policy, bad --block-size, --out not "
        f"{'/'.join(FORMATS)} or not writable, matplotlib missing); 130 Ctrl-C",
    )
    # Repeated: one panel per policy, side by side; one row of panels per block size.
    options.POLICY.add(p, repeatable=True)  # required unless --engine sglang (checked in run)
    options.BLOCK_SIZE.add(p, shown_default=str(DEFAULT_BLOCK_SIZE), repeatable=True)
    options.OUT.add(p, required=True)
    options.ENGINE.add(p)
    options.CONTEXT_LEN.add(p, default=None, shown_default="8192")
    p.set_defaults(func=run)


def block_sizes(values: list[int] | None) -> list[int]:
    """The block sizes asked for, each once, in order (parsed and bounded by ``--block-size``)."""
    return list(dict.fromkeys(values or [DEFAULT_BLOCK_SIZE]))


def run(args: argparse.Namespace) -> int:
    """Draw the capacity map of the policies asked for; the exit status."""
    engine = engine_of(args, "map")  # options that do not apply to the engine: refused first
    if engine is not None and engine.subject is None:  # the engine draws its own plane
        run = engine.command("map")
        args.out = output_file("--out", args.out)
        check_out(args.out)
        return run(engine.spec, args)
    if engine is not None:
        args.policy = [engine.subject]
    if not args.policy:
        raise HarnessError("the following arguments are required: --policy")
    require_matplotlib()
    out = output_file("--out", args.out)  # absolute before a policy's module is imported
    assert out is not None  # required
    policies = {spec: load_checked_policy(spec) for spec in args.policy}
    sizes = block_sizes(args.block_size)
    check_out(out)
    draw([(spec, policy, bs) for bs in sizes for spec, policy in policies.items()], out)
    print(f"wrote {out}: {len(policies)} policies x {len(sizes)} block sizes")
    return 0
