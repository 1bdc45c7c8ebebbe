"""Deliberately broken sizing policies: each must be caught by the property suite.

Each one is a plausible slip in the width formula. If the properties pass on
any of these, a property has gone blind (see meta/test_meta_capacity.py).
"""

from __future__ import annotations

from crossattn_sizing.base.intmath import align_up, cdiv
from crossattn_sizing.core.config import GroupKind, RunnerConfig
from crossattn_sizing.core.policies import alignment_multiple, sizing_length


def _attention_widths(config: RunnerConfig, blocks_of) -> tuple[int, ...]:  # type: ignore[no-untyped-def]
    out = []
    for group in config.groups:
        if group.kind is GroupKind.MAMBA:
            out.append(1 + config.num_speculative_blocks)
        else:
            out.append(blocks_of(group) * group.bpk)
    return tuple(out)


def floor_div(config: RunnerConfig) -> tuple[int, ...]:
    """Off-by-one: floor instead of ceiling division."""
    big_l = sizing_length(config, "fixed")
    return _attention_widths(config, lambda g: big_l // (g.block_size * config.dcp_factor(g)))


def dcp_on_replicated(config: RunnerConfig) -> tuple[int, ...]:
    """Divides every group by the DCP size, replicated ones included."""
    big_l = sizing_length(config, "fixed")
    return _attention_widths(config, lambda g: cdiv(big_l, g.block_size * config.dcp_size))


def dcp_twice(config: RunnerConfig) -> tuple[int, ...]:
    """Applies the DCP factor twice (once in the manager, once in the table)."""
    big_l = sizing_length(config, "fixed")
    return _attention_widths(config, lambda g: cdiv(big_l, g.block_size * config.dcp_factor(g) ** 2))


def kernel_units_forgotten(config: RunnerConfig) -> tuple[int, ...]:
    """Counts manager blocks where the row stores kernel-block entries."""
    big_l = sizing_length(config, "fixed")
    widths = _attention_widths(config, lambda g: cdiv(big_l, g.block_size * config.dcp_factor(g)))
    groups = config.groups
    return tuple(w if g.kind is GroupKind.MAMBA else w // g.bpk for w, g in zip(widths, groups, strict=True))


def align_down(config: RunnerConfig) -> tuple[int, ...]:
    """Rounds the width down to the alignment multiple instead of up."""
    big_l = sizing_length(config, "fixed")

    def blocks(g):  # type: ignore[no-untyped-def]
        w = cdiv(big_l, g.block_size * config.dcp_factor(g))
        a = alignment_multiple(g.block_size, "gcd")
        return (w // a) * a

    return _attention_widths(config, blocks)


def decoder_length_only(config: RunnerConfig) -> tuple[int, ...]:
    """Sizes every row for max_model_len alone, as a decoder-only model would."""
    m = config.max_model_len
    return _attention_widths(config, lambda g: cdiv(m, g.block_size * config.dcp_factor(g)))


def source_positions_or_budget(config: RunnerConfig) -> tuple[int, ...]:
    """Uses S when present and E only when S is absent: misses E > S > 0."""
    e = config.encoder_budget if config.max_source_positions is None else config.source_positions
    return _gcd_aligned(config, max(config.max_model_len, e))


def _gcd_aligned(config: RunnerConfig, big_l: int) -> tuple[int, ...]:
    """The v0.34 widths for a given length ``L`` (what a broken length is plugged into)."""

    def blocks(g):  # type: ignore[no-untyped-def]
        w = cdiv(big_l, g.block_size * config.dcp_factor(g))
        return align_up(w, alignment_multiple(g.block_size, "gcd"))

    return _attention_widths(config, blocks)


def capped_length(config: RunnerConfig) -> tuple[int, ...]:
    """Caps ``L`` at 64K tokens ("no model needs more"): wrong for every long context."""
    return _gcd_aligned(config, min(sizing_length(config, "fixed"), 1 << 16))


def clamped_budget(config: RunnerConfig) -> tuple[int, ...]:
    """Clamps the encoder budget to four times ``max_model_len`` before the max()."""
    m = config.max_model_len
    return _gcd_aligned(config, max(m, min(config.encoder_budget, 4 * m), config.source_positions))


def budget_only_if_set(config: RunnerConfig) -> tuple[int, ...]:
    """Branches on field presence: reads ``E`` only when set, forgetting that it defaults to ``B``."""
    e = config.max_num_encoder_input_tokens or 0
    return _gcd_aligned(config, max(config.max_model_len, e, config.source_positions))


def prefix_length_under_dcp(config: RunnerConfig) -> tuple[int, ...]:
    """Branches on DCP: the fix applied to the single-rank path only, ``max(M, S)`` under DCP."""
    return _gcd_aligned(config, sizing_length(config, "prefix" if config.dcp_size > 1 else "fixed"))


def floor_for_large_blocks(config: RunnerConfig) -> tuple[int, ...]:
    """Branches on ``block_size > 128`` (no alignment there) and floors the division in that branch."""
    big_l = sizing_length(config, "fixed")

    def blocks(g):  # type: ignore[no-untyped-def]
        span = g.block_size * config.dcp_factor(g)
        if g.block_size > 128:
            return big_l // span
        return align_up(cdiv(big_l, span), alignment_multiple(g.block_size, "gcd"))

    return _attention_widths(config, blocks)


def length_minus_one(config: RunnerConfig) -> tuple[int, ...]:
    """Off by one past an edge: sizes for ``L - 1`` tokens, no alignment.

    Rows are one token short only where ``L`` is one token past a block edge
    and a request has exactly ``L`` tokens: the shape of ``M = 3328`` missing
    the summary token of a 3329-token page.
    """
    big_l = max(1, sizing_length(config, "fixed") - 1)
    return _attention_widths(config, lambda g: cdiv(big_l, g.block_size * config.dcp_factor(g)))


def aligned_ceil_off_by_one(config: RunnerConfig) -> tuple[int, ...]:
    """An alignment edge: ceil-divides by the aligned span with ``+ span - 2`` instead of ``- 1``.

    Wrong only when ``L`` is exactly one token past a multiple of the aligned
    span (``bs * C * a`` tokens, 128 blocks' worth of alignment for small blocks).
    """
    big_l = sizing_length(config, "fixed")

    def blocks(g):  # type: ignore[no-untyped-def]
        a = alignment_multiple(g.block_size, "gcd")
        span = g.block_size * config.dcp_factor(g) * a
        return (big_l + span - 2) // span * a

    return _attention_widths(config, blocks)


BROKEN = {
    f.__name__: f
    for f in (
        floor_div,
        dcp_on_replicated,
        dcp_twice,
        kernel_units_forgotten,
        align_down,
        decoder_length_only,
        source_positions_or_budget,
        capped_length,
        clamped_budget,
        budget_only_if_set,
        prefix_length_under_dcp,
        floor_for_large_blocks,
        length_minus_one,
        aligned_ceil_off_by_one,
    )
}

BOUNDARY = ("length_minus_one", "aligned_ceil_off_by_one")
"""The thin-slice slips: wrong only one token past an edge (a block or an aligned span)."""
