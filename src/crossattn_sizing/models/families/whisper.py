"""Whisper: every input padded to 30 s, so always ``max_source_positions`` encoder frames."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from crossattn_sizing.base.errors import ConfigError
from crossattn_sizing.models.family import Derived, Family, int_field, near_edges

MAX_SOURCE_POSITIONS = 300  # the strategy's tiny configs
MAX_TARGET_POSITIONS = 64


def encoder_len(hf_config: Any, image_size: tuple[int, int] | None, source_len: int | None) -> Derived:
    """Whisper's encoder tokens: always ``max_source_positions`` (audio padded to 30 s); others refused."""
    s = int_field(hf_config, "max_source_positions")
    if s is None or s < 1:
        raise ConfigError("max_source_positions", s, "a Whisper config needs a positive one")
    if source_len is not None and source_len != s:
        raise ConfigError("encoder_len", source_len, f"Whisper always has {s}")
    return Derived(s, f"max_source_positions={s}: Whisper pads every input to 30 s of audio")


def attention_class() -> type:
    """transformers' Whisper attention layer, imported only when a property needs it."""
    from transformers.models.whisper.modeling_whisper import WhisperAttention

    return WhisperAttention


def tiny_config(length_field: int, source_positions: int | None, **dims: Any) -> Any:
    """A tiny Whisper config with the given decoder and source lengths."""
    import transformers

    return transformers.WhisperConfig(
        max_source_positions=source_positions,  # type: ignore[arg-type]  # None: the config derive refuses
        max_target_positions=length_field, **dims
    )


def draw_lengths(draw: st.DrawFn, block_size: int, n: int) -> tuple[int, int | None, tuple[int, ...]]:
    """Every request has ``e = S``; ``max_target_positions`` is the decoder's length field."""
    s = draw(near_edges(MAX_SOURCE_POSITIONS, block_size), label="max_source_positions")
    length_field = draw(st.integers(1, MAX_TARGET_POSITIONS), label="max_target_positions")
    return length_field, s, (s,) * n


FAMILY = Family(
    name="whisper",
    model_type="whisper",
    encoder_len=encoder_len,
    attention_class=attention_class,
    query_prescaled=True,  # WhisperAttention multiplies q_proj's output by ``scaling``
    tiny_config=tiny_config,
    draw_lengths=draw_lengths,
)
