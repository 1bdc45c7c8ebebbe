"""The policy's widths in numpy form: the built-in rules evaluated over whole arrays of configs.

Why: calling a policy once per config costs microseconds each; a
:class:`SizingPolicy` is a handful of integer formulas, so its widths over a
tile of configs are a few array operations. These mirror
:func:`crossattn_sizing.core.policies.widths` rule for rule; ``prove`` spot-checks
them against the policy itself on every run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from crossattn_sizing.core.policies import Alignment, Length, Policy, SizingPolicy


def vector_length(length: Length, m: np.ndarray, encoder_budget: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``L`` of :func:`policies.sizing_length` for encoder-decoder configs; ``s`` may be ABSENT (-1)."""
    s0 = np.maximum(s, 0)
    if length == "fixed":
        return np.maximum(np.maximum(m, encoder_budget), s0)
    if length == "prefix":
        return np.maximum(m, s0)
    if length == "v1":
        return np.maximum(m, encoder_budget)
    raise ValueError(f"unknown length rule {length!r}")


def alignment_multiples(block_size: np.ndarray, alignment: Alignment) -> np.ndarray:
    """:func:`policies.alignment_multiple` element-wise."""
    bs = np.asarray(block_size, dtype=np.int64)
    if alignment == "none":
        return np.ones_like(bs)
    if alignment == "pow2":
        return np.where(bs <= 128, 128 // bs, 1)
    if alignment == "gcd":
        return 128 // np.gcd(128, bs)
    raise ValueError(f"unknown alignment rule {alignment!r}")


def _cdiv(a: Any, b: Any) -> Any:
    return -((-a) // b)


def row_entries(
    big_l: np.ndarray, bs: np.ndarray, kbs: np.ndarray, dcp_size: np.ndarray, alignment: Alignment
) -> np.ndarray:
    """A cross row's width in entries: ``align(cdiv(L, bs*C), a) * bpk``.

    Written as ``cdiv(L, bs*C*a) * a * bpk`` (``cdiv(cdiv(x, m), n) == cdiv(x, m*n)``),
    one division instead of two, which is what :func:`prove` evaluates.
    """
    a = alignment_multiples(bs, alignment)
    return _cdiv(big_l, bs * dcp_size * a) * (a * (bs // kbs))


def vector_widths(
    length: Length,
    alignment: Alignment,
    bs: np.ndarray,
    kbs: np.ndarray,
    dcp_size: np.ndarray,
    m: np.ndarray,
    encoder_budget: np.ndarray,
    s: np.ndarray,
) -> np.ndarray:
    """:func:`policies.widths` of one DCP-sharded cross group, over broadcast arrays."""
    return row_entries(vector_length(length, m, encoder_budget, s), bs, kbs, dcp_size, alignment)


def vector_form(policy: Policy) -> tuple[Length, Alignment] | None:
    """``(length, alignment)`` when ``policy`` is a plain :class:`SizingPolicy`, else None.

    A subclass that overrides ``__call__`` is not trusted to match its fields.
    """
    if not isinstance(policy, SizingPolicy) or type(policy).__call__ is not SizingPolicy.__call__:
        return None
    if policy.length not in ("fixed", "prefix", "v1") or policy.alignment not in ("none", "pow2", "gcd"):
        return None  # a rule this mirror does not know: let the policy answer for itself
    return policy.length, policy.alignment
