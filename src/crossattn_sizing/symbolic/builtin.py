"""The built-in policies' widths as solver terms, read from each policy's own rule.

A :class:`~crossattn_sizing.core.policies.SizingPolicy` is a length rule and an
alignment rule (docs/spec.md); the terms here follow
:func:`~crossattn_sizing.core.policies.widths` step by step, so a policy added
to ``BUILTIN_POLICIES`` with an existing rule is proved with no change here.
The alignment's conditions (``bs <= 128`` for ``pow2``, the power of two
dividing ``bs`` for ``gcd``) are if-then-else terms.
"""

from __future__ import annotations

from typing import Any

from crossattn_sizing.core.config import GroupKind
from crossattn_sizing.core.policies import SizingPolicy
from crossattn_sizing.symbolic.encoding import Encoding
from crossattn_sizing.symbolic.obligation import PathWidths
from crossattn_sizing.symbolic.terms import ConfigTerms, GroupTerms


def sizing_length(enc: Encoding, cfg: ConfigTerms, length: str) -> Any:
    """``L`` of :func:`~crossattn_sizing.core.policies.sizing_length` (every config here: encoder-decoder)."""
    m, e_budget, s = cfg.max_model_len, cfg.encoder_budget, cfg.source_positions
    if length == "fixed":
        return enc.extreme([m, e_budget, s], largest=True)
    if length == "prefix":
        return enc.extreme([m, s], largest=True)
    return enc.extreme([m, e_budget], largest=True)


def alignment_multiple(enc: Encoding, group: GroupTerms, alignment: str) -> Any:
    """:func:`~crossattn_sizing.core.policies.alignment_multiple` as a term."""
    z3, bs = enc.z3, group.block_size
    if alignment == "none":
        return 1
    if alignment == "pow2":
        return z3.If(bs <= 128, enc.floordiv(128, bs, positive=True), 1)
    # 128 // gcd(128, bs): gcd(128, bs) is 2**k for the first k with 2**(k+1) not dividing bs, else 128.
    multiple: Any = 1
    for k in reversed(range(7)):
        multiple = z3.If(bs % 2 ** (k + 1) != 0, 128 // 2**k, multiple)
    return multiple


def builtin_paths(enc: Encoding, cfg: ConfigTerms, policy: SizingPolicy) -> list[PathWidths]:
    """The policy's widths on ``cfg``: one path, its conditions inside the terms."""
    big_l = sizing_length(enc, cfg, policy.length)
    out = []
    for group in cfg.groups:
        if group.kind is GroupKind.MAMBA:  # not in any shape proved; named so a new shape is not misread
            raise ValueError("mamba groups are not in the symbolic shapes")
        blocks = enc.cdiv(big_l, group.block_size * cfg.dcp_factor(group), positive=True)
        multiple = alignment_multiple(enc, group, policy.alignment)
        blocks = enc.cdiv(blocks, multiple, positive=True) * multiple
        out.append(blocks * group.bpk)
    return [PathWidths((), tuple(out), (), tuple(enc.side))]
