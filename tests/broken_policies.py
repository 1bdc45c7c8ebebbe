"""Deliberately broken sizing policies: each must be caught by the property suite.

Each one is a plausible slip in the width formula. If the properties pass on
any of these, a property has gone blind (see test_meta_capacity.py).
"""

from __future__ import annotations

from crossattn_sizing.config import GroupKind, RunnerConfig
from crossattn_sizing.policies import align_up, alignment_multiple, cdiv, sizing_length


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
    big_l = max(config.max_model_len, e)

    def blocks(g):  # type: ignore[no-untyped-def]
        w = cdiv(big_l, g.block_size * config.dcp_factor(g))
        return align_up(w, alignment_multiple(g.block_size, "gcd"))

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
    )
}
