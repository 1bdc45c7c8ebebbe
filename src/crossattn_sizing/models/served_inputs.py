"""Each model family's served encoder lengths, read from transformers' own configs and processors.

The lengths a request can carry are the model's preprocessing's, not any
integer (:mod:`crossattn_sizing.core.served`). Where transformers states them
(a vision config's tile and patch sizes, Whisper's feature extractor, a text
model's positions) they are read from its classes, built locally with the
published models' values (nothing is downloaded); the rest are facts of
docs/spec.md §12 (:mod:`crossattn_sizing.core.known_configs`). Imports
transformers when a function is called, never at import.
"""

from __future__ import annotations

import functools
from typing import Any

from crossattn_sizing.core import served
from crossattn_sizing.core.known_configs import LLAMA_32_VISION, NEMOTRON_NARROW_PAGE, NEMOTRON_PAGE
from crossattn_sizing.models._hf import require_transformers

T5_SOURCE_TOKENS = 512
"""T5 has relative positions and no length field in its config; its published tokenizers'
``model_max_length`` (512) bounds a source (docs/spec.md §12)."""

WHISPER_CONV_STRIDE = 2
"""Whisper's encoder halves the mel frames (its second convolution has stride 2; transformers'
``WhisperEncoder`` code, not a config field)."""


@functools.cache
def mllama_images() -> served.EncoderLengths:
    """Llama-3.2-Vision's image requests, from a ``MllamaVisionConfig`` with the published vision tower
    (560 px, patch 14, 4 tiles): ``(image_size // patch_size)^2 + 1`` = 1601 tokens a tile (the patch grid
    and its class token), one image of 1 to ``max_num_tiles`` tiles: 1601, 3202, 4803 or 6404 tokens."""
    transformers = require_transformers()
    vision: Any = transformers.MllamaVisionConfig(**LLAMA_32_VISION)
    per_tile = (vision.image_size // vision.patch_size) ** 2 + 1
    return served.mllama(per_tile, vision.max_num_tiles, "Mllama (Llama-3.2-Vision)")


@functools.cache
def whisper_audio() -> served.EncoderLengths:
    """Whisper's fixed frames: the feature extractor pads every input to ``nb_max_frames`` mel frames
    (30 s), which the encoder halves; transformers' ``max_source_positions`` must agree."""
    transformers = require_transformers()
    frames = transformers.WhisperFeatureExtractor().nb_max_frames // WHISPER_CONV_STRIDE
    positions = transformers.WhisperConfig().max_source_positions
    if frames != positions:
        raise ValueError(f"Whisper: {frames} encoder frames from the feature extractor, "
                         f"max_source_positions {positions}: transformers changed")
    return served.whisper(frames)


def nemotron_parse_pages() -> served.EncoderLengths:
    """Nemotron-Parse's page sizes (its config is remote code, never fetched: docs/spec.md §6)."""
    from crossattn_sizing.models.nemotron_parse_config import encoder_len

    return served.nemotron_parse(tuple(encoder_len(page) for page in (NEMOTRON_NARROW_PAGE, NEMOTRON_PAGE)))


@functools.cache
def text_sources(family: str) -> served.EncoderLengths:
    """BART, mBART (``max_position_embeddings`` of their configs) or T5 (:data:`T5_SOURCE_TOKENS`)."""
    transformers = require_transformers()
    configs = {"BART": transformers.BartConfig, "mBART": transformers.MBartConfig}
    if family == "T5":
        return served.positional("T5", T5_SOURCE_TOKENS)
    if family not in configs:
        raise ValueError(f"no text encoder family {family!r}: BART, mBART or T5")
    return served.positional(family, configs[family]().max_position_embeddings)


__all__ = ["T5_SOURCE_TOKENS", "mllama_images", "nemotron_parse_pages", "text_sources", "whisper_audio"]
