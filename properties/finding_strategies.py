"""Strategies for the findings' properties: the cases of the cross-attention DCP inconsistency.

The finding (docs/spec.md §5, :mod:`crossattn_sizing.findings.dcp`) lives where the
engine's cross-attention path ignores DCP: a config with ``C > 1`` and one
cross group, and an encoder length the scheduler admits. Lengths reach a few
thousand tokens (past a Nemotron-Parse page) and block sizes include
non-powers of two, so rows of many shapes are tried; the config itself is
built by :mod:`properties.config_strategies` like every other.
"""

from __future__ import annotations

from hypothesis import strategies as st

from crossattn_sizing.core import admission
from crossattn_sizing.core.config import GroupKind, RunnerConfig

from .config_strategies import (
    HypothesisDraws,
    batched_tokens,
    draw_group,
    draw_interleave,
    encoder_decoder_config,
)

DCP_BLOCK_SIZES = (16, 1, 2, 8, 32, 64, 128, 256, 48, 96)


@st.composite
def dcp_cross_cases(draw: st.DrawFn) -> tuple[RunnerConfig, int]:
    """An encoder-decoder config with ``C > 1`` and one cross group, and an admitted encoder length."""
    m = draw(st.integers(1, 4096), label="max_model_len")
    budget = draw(st.one_of(st.none(), st.integers(1, 8192)), label="max_num_encoder_input_tokens")
    source = draw(st.one_of(st.none(), st.integers(0, 4096)), label="max_source_positions")
    b = batched_tokens(m, budget, draw(st.integers(0, 1024), label="batched_tokens_above_needed"))
    c = draw(st.integers(2, 8), label="dcp_size")
    d = HypothesisDraws(draw)
    groups = (draw_group(d, GroupKind.CROSS, DCP_BLOCK_SIZES, c),)
    config = encoder_decoder_config(groups, m, b, budget, source, (c, draw_interleave(d, groups, c)))
    e = draw(st.integers(1, admission.encoder_bound(config)), label="encoder_len")
    return config, e
