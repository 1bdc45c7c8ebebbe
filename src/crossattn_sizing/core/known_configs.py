"""The real models' shapes every part of the harness replays, written once.

Figures from docs/spec.md: a Nemotron-Parse page of HxW pixels at patch 16
has ``(H // 16) * ((W // 16) // 4) + 1`` encoder tokens and its config has no
``max_source_positions``; Whisper pads every input to 30 s, 1500 encoder
frames, with ``max_source_positions = 1500`` and ``max_model_len = 448``;
BART and mBART embed at most ``max_position_embeddings = 1024`` source tokens.
The audit, the pinned regressions and the attention properties all build
their configs here, so a corrected figure is corrected everywhere.
"""

from __future__ import annotations

from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig

NEMOTRON_PAGE = (2048, 1664)
"""The page (height, width) whose 3329 tokens overflow a 2048-token row before PR #46753."""
NEMOTRON_PAGE_TOKENS = 3329
NEMOTRON_NARROW_PAGE = (2048, 1648)
NEMOTRON_NARROW_PAGE_TOKENS = 3201
NEMOTRON_MAX_MODEL_LEN = 2048
NEMOTRON_BATCHED_TOKENS = 4096
"""At least one page: the engine refuses to start with fewer batched tokens than a page."""

WHISPER_FRAMES = 1500
WHISPER_MAX_MODEL_LEN = 448

BART_POSITIONS = 1024
"""``max_position_embeddings`` of BART and mBART: the longest source either embeds."""

BLOCK_SIZE = 16


def encoder_decoder_groups(block_size: int = BLOCK_SIZE, kernel_block_size: int | None = None,
                           dcp_sharded: bool = True) -> tuple[KVCacheGroup, ...]:
    """The two KV-cache groups of an encoder-decoder model: decoder self-attention, cross-attention."""
    kbs = block_size if kernel_block_size is None else kernel_block_size
    return (
        KVCacheGroup(GroupKind.FULL, block_size, kbs),
        KVCacheGroup(GroupKind.CROSS, block_size, kbs, dcp_sharded=dcp_sharded),
    )


def encoder_decoder(max_model_len: int, max_num_batched_tokens: int, max_source_positions: int | None
                    ) -> RunnerConfig:  # fmt: skip
    """An encoder-decoder model's config with the two groups of :func:`encoder_decoder_groups`."""
    return RunnerConfig(
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
        max_source_positions=max_source_positions,
        groups=encoder_decoder_groups(),
    )


def nemotron_parse(max_model_len: int = NEMOTRON_MAX_MODEL_LEN) -> RunnerConfig:
    """Nemotron-Parse served with ``--max-model-len max_model_len``: no ``max_source_positions``."""
    return encoder_decoder(max_model_len, NEMOTRON_BATCHED_TOKENS, None)


def whisper(max_num_batched_tokens: int = WHISPER_FRAMES) -> RunnerConfig:
    """Whisper at its own limits: ``max_model_len`` 448, ``max_source_positions`` 1500."""
    return encoder_decoder(WHISPER_MAX_MODEL_LEN, max_num_batched_tokens, WHISPER_FRAMES)


LLAMA_32_VISION = {"image_size": 560, "patch_size": 14, "max_num_tiles": 4}
"""Llama-3.2-11B-Vision's vision tower (its published config), for a ``transformers.MllamaVisionConfig``
built locally: transformers' own defaults are smaller (image_size 448). One image of ``t`` tiles is
``t * ((560 // 14)**2 + 1)`` encoder tokens: 6404 for 4 tiles."""
