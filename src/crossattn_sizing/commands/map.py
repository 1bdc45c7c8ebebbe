"""``crossattn-sizing map``: draw the capacity map of one or more policies (PNG or SVG).

One panel per policy and block size, side by side, so the pre-fix sizing and
the fix are compared at a glance (:mod:`crossattn_sizing.findings.capacity_map`).
Bad input (an unknown policy, a block size that is not a positive integer, an
``--out`` that is not ``.png``/``.svg`` or cannot be written, matplotlib not
installed) is one line and exit 2, checked before anything is drawn.
"""

from __future__ import annotations

import argparse

from crossattn_sizing.base.errors import HarnessError, OptionError
from crossattn_sizing.commands import options
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
    p.add_argument("--out", required=True, help="the picture to write: a .png or .svg file")
    options.ENGINE.add(p)
    options.CONTEXT_LEN.add(p, default=None, shown_default="8192")
    p.set_defaults(func=run)


def block_sizes(values: list[int] | None) -> list[int]:
    """The block sizes asked for, each once, in order (parsed and bounded by ``--block-size``)."""
    return list(dict.fromkeys(values or [DEFAULT_BLOCK_SIZE]))


def run(args: argparse.Namespace) -> int:
    """Draw the capacity map of the policies asked for; the exit status."""
    if args.engine is not None:
        return run_sglang(args)
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


def run_sglang(args: argparse.Namespace) -> int:
    """``map --engine sglang==X``: SGLang's read-side plane, the issue's batch judged by the release."""
    from crossattn_sizing.engine.sglang.check import int_option, mllama_mixed_batch
    from crossattn_sizing.engine.sglang.client import SglangReads
    from crossattn_sizing.engine.sglang.source import is_sglang_spec
    from crossattn_sizing.findings.sglang_map import draw_sglang

    if not is_sglang_spec(args.engine):
        raise OptionError("--engine", args.engine, "map takes sglang==X or sglang@PATH (vLLM: --policy)")
    require_matplotlib()
    context_len = int_option("--context-len", args.context_len or "8192", 8)
    out = output_file("--out", args.out)
    assert out is not None  # required
    check_out(out)
    _, _, batch, _ = mllama_mixed_batch()
    (e, p, _d), (_, p2, d2) = batch
    markers = []
    if e + p + 1 < context_len - 6 and p2 + 1 < context_len - 6:
        found = SglangReads(args.engine).first_problem(context_len, batch)
        markers.append(("Mllama 4 tiles + 3000-token text", e, d2, "holds" if found is None else found[0]))
    draw_sglang(args.engine, context_len, markers, out)
    print(f"wrote {out}: SGLang's read-side plane at context_len {context_len}"
          + "".join(f"; {m[0]}: {args.engine} {m[3]}" for m in markers))
    return 0
