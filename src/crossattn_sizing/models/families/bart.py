"""BART: a source of at most ``max_position_embeddings`` tokens, and no ``max_source_positions``."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from crossattn_sizing.base.errors import ConfigError
from crossattn_sizing.models.family import Derived, Family, int_field, near_edges

MAX_POSITIONS = 300  # the strategy's tiny configs


def encoder_len(hf_config: Any, image_size: tuple[int, int] | None, source_len: int | None) -> Derived:
    """The source length, at most ``max_position_embeddings`` (the longest the encoder embeds)."""
    limit = int_field(hf_config, "max_position_embeddings")
    if limit is None or limit < 1:
        raise ConfigError("max_position_embeddings", limit, "a BART-like config needs a positive one")
    if source_len is None:
        return Derived(limit, f"max_position_embeddings={limit}, the longest source the encoder embeds")
    if isinstance(source_len, bool) or not isinstance(source_len, int) or not 1 <= source_len <= limit:
        raise ConfigError(
            "encoder_len", source_len, f"must be 1..{limit} (max_position_embeddings of the encoder)"
        )
    return Derived(source_len, f"a source of {source_len} tokens (<= max_position_embeddings={limit})")


def attention_class() -> type:
    """transformers' BART attention layer, imported only when a property needs it."""
    from transformers.models.bart.modeling_bart import BartAttention

    return BartAttention


def tiny_config(length_field: int, source_positions: int | None, **dims: Any) -> Any:
    """A tiny BART config: the decoder length in ``max_position_embeddings`` (BART has no source field)."""
    import transformers

    return transformers.BartConfig(max_position_embeddings=length_field, **dims)


def draw_lengths(draw: st.DrawFn, block_size: int, n: int) -> tuple[int, int | None, tuple[int, ...]]:
    """Sources of any length up to ``max_position_embeddings``, often on block edges."""
    length_field = draw(st.integers(1, MAX_POSITIONS), label="max_position_embeddings")
    lens = tuple(draw(near_edges(length_field, block_size), label=f"encoder_len[{i}]") for i in range(n))
    return length_field, None, lens


FAMILY = Family(
    name="bart",
    model_type="bart",
    encoder_len=encoder_len,
    attention_class=attention_class,
    tiny_config=tiny_config,
    draw_lengths=draw_lengths,
)
