"""``crossattn-sizing map``: draw the capacity map of one or more policies (PNG or SVG).

One panel per policy and block size, side by side, so the pre-fix sizing and
the fix are compared at a glance (:mod:`crossattn_sizing.capacity_map`).
Bad input (an unknown policy, a block size that is not a positive integer, an
``--out`` that is not ``.png``/``.svg`` or cannot be written, matplotlib not
installed) is one line and exit 2, checked before anything is drawn.
"""

from __future__ import annotations

import argparse

from crossattn_sizing.capacity_map import FORMATS, check_out, draw, require_matplotlib
from crossattn_sizing.errors import OptionError
from crossattn_sizing.outputs import output_file
from crossattn_sizing.resolve import load_checked_policy


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "map",
        help="draw max_model_len against encoder tokens: where each policy's cross rows cover or overflow",
        epilog="exit status: 0 drawn; 2 bad input (unknown policy, bad --block-size, --out not "
        f"{'/'.join(FORMATS)} or not writable, matplotlib missing); 130 Ctrl-C",
    )
    p.add_argument("--policy", action="append", required=True,
                   help="policy to draw (built-in name or module:attr); repeatable: panels side by side")
    p.add_argument("--block-size", action="append", dest="block_sizes",
                   help="block size of the KV-cache groups (default 16); repeatable: one row of panels each")
    p.add_argument("--out", required=True, help="the picture to write: a .png or .svg file")
    p.set_defaults(func=run)


def block_sizes(values: list[str] | None) -> list[int]:
    out = []
    for text in values or ["16"]:
        try:
            size = int(text)
        except ValueError:
            raise OptionError("--block-size", repr(text), "must be an integer") from None
        if size < 1:
            raise OptionError("--block-size", size, "must be >= 1")
        out.append(size)
    return list(dict.fromkeys(out))


def run(args: argparse.Namespace) -> int:
    require_matplotlib()
    policies = {spec: load_checked_policy(spec) for spec in args.policy}
    sizes = block_sizes(args.block_sizes)
    out = output_file("--out", args.out)
    assert out is not None  # required
    check_out(out)
    draw([(spec, policy, bs) for bs in sizes for spec, policy in policies.items()], out)
    print(f"wrote {out}: {len(policies)} policies x {len(sizes)} block sizes")
    return 0
