"""mBART: BART's encoder-token rule and lengths, its own config and attention classes."""

from __future__ import annotations

import dataclasses
from typing import Any

from crossattn_sizing.models.families import bart


def attention_class() -> type:
    """transformers' mBART attention layer, imported only when a property needs it."""
    from transformers.models.mbart.modeling_mbart import MBartAttention

    return MBartAttention


def tiny_config(length_field: int, source_positions: int | None, **dims: Any) -> Any:
    """A tiny mBART config: the decoder length in ``max_position_embeddings`` (no source field)."""
    import transformers

    return transformers.MBartConfig(max_position_embeddings=length_field, **dims)


FAMILY = dataclasses.replace(
    bart.FAMILY, name="mbart", model_type="mbart", attention_class=attention_class, tiny_config=tiny_config
)
