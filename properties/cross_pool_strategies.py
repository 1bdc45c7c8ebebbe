"""Hypothesis strategies for the cross-pool capacity property: encoder-decoder configs and engine settings.

Apart from the property (:mod:`properties.cross_pool_capacity`) so that a
meta-test or a benchmark draws the same cases. A case is a model family's
published config (:data:`crossattn_sizing.core.cross_pool.FAMILIES`: Whisper's
sizes, T5, BART, mBART) with each of the six limit keys TensorRT-LLM reads and
``max_source_positions`` declared or not (their values what the family's
encoder allows; in a Whisper config the two generic position keys name the
decoder's 448), one request's encoder tokens, ``max_input_len`` unset, below,
equal to or above them, the engine's ``max_seq_len`` and its block size. Every
case is admitted by the engine (:meth:`CrossPoolCase.refusal`): a text
encoder's prompt is not longer than ``max_input_len`` (so "below" is drawn for
audio encoders only, whose frames ``max_input_len`` does not bound).

The draws shrink toward the issue's shape: Whisper-large-v3 first, its
published keys only, ``max_input_len`` 1024 (TensorRT-LLM's default) below
its 1500 frames, ``max_seq_len`` 2048, 32 tokens a block.
"""

from __future__ import annotations

from hypothesis import strategies as st

from crossattn_sizing.core.cross_pool import DECLARABLE, FAMILIES, SOURCE_POSITIONS, CrossPoolCase

MAX_LEN = 16384
"""The largest ``max_seq_len`` and ``max_input_len`` drawn."""

MODES = ("below", "unset", "equal", "above")
"""Where ``max_input_len`` lies against the request's encoder tokens (shrinks to the first)."""


@st.composite
def declared_keys(draw: st.DrawFn, family: str) -> tuple[str, ...]:
    """Which encoder-limit keys the config declares: the published ones, each other key drawn in or out.

    A Whisper config always carries ``max_source_positions`` (its encoder has
    exactly that many positions); the published keys of the others may be
    dropped too (a config without any declared limit).
    """
    model = FAMILIES[family]
    keys = []
    for key in DECLARABLE:
        always = model.audio and key == SOURCE_POSITIONS
        if always or draw(st.booleans()) != (key in model.native):  # shrinks to the published config
            keys.append(key)
    return tuple(keys)


@st.composite
def cross_pool_cases(draw: st.DrawFn) -> CrossPoolCase:
    """One admitted request on one engine configuration (see the module's docstring)."""
    family = draw(st.sampled_from(tuple(FAMILIES)))
    model = FAMILIES[family]
    config = model.config(draw(declared_keys(family)))
    max_seq_len = draw(st.one_of(st.sampled_from((2048, 448, 4096)), st.integers(1, MAX_LEN)))
    tpb = draw(st.sampled_from((32, 64, 16, 8, 128)))
    mode = draw(st.sampled_from(MODES if model.audio else MODES[1:]))
    if model.audio:
        encoder_len = model.encoder_positions
    else:
        limits = [config[k] for k in DECLARABLE if k in config]
        bound = min([*limits, max_seq_len if mode == "unset" else MAX_LEN])
        encoder_len = draw(st.integers(1, bound))
    if mode == "unset":
        max_input_len = None
    elif mode == "below":
        max_input_len = draw(
            st.one_of(st.just(1024), st.integers(1, encoder_len - 1)).filter(lambda n: n < encoder_len)
        )
    elif mode == "equal":
        max_input_len = encoder_len
    else:
        max_input_len = draw(st.integers(encoder_len + 1, encoder_len + MAX_LEN))
    return CrossPoolCase(family, config, encoder_len, max_seq_len, max_input_len, tpb)
