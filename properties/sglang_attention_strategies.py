"""Strategies for SGLang's attention property: mixed batches of Whisper or Mllama requests at a decode step.

A case is one model's cross-attention layer and a batch of requests laid out
in SGLang's shared rows (``[E encoder | d decoder]``). The shapes come from
transformers' own config classes, built locally with few heads (nothing is
downloaded): Whisper's ``max_source_positions`` (E = 1500 for every request,
its encoder always emits 1500 frames) and heads from a ``WhisperConfig``;
Mllama's vision tokens (``tiles * ((image_size // patch_size)^2 + 1)`` per
request, 1 to ``max_num_tiles`` tiles, transformers' 448 px defaults or
Llama-3.2-Vision's 560 px) and its text model's heads, grouped-query KV heads
and head size from a ``MllamaConfig``. Requests of one batch differ in their
encoder and decoder lengths; a request has several prompt tokens, and may
come with a cached prefix (its encoder and some prompt tokens, computed by an
earlier request: the extend then computes only the rest). The softmax scale
is the model's, or another a model may set (``1.0``: T5's unscaled
attention; any in ``[0.05, 2]``): a backend that ignores the layer's scale
and uses its own default shows only then. Content is N(0, 1), seeded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import event
from hypothesis import strategies as st

from crossattn_sizing.core.batch_requests import cached_prefix, extended
from crossattn_sizing.core.known_configs import LLAMA_32_VISION

MODELS = ("whisper", "mllama")
HEAD_DIMS = (2, 4, 8)
"""Head sizes stay tiny: the reference attends in pure Python over thousands of encoder tokens."""


@dataclass(frozen=True)
class AttentionCase:
    """One batch through one decoder cross-attention layer, at the decode step after its extend."""

    model: str
    heads: int
    kv_heads: int
    head_dim: int
    scale: float
    batch: tuple[tuple[int, ...], ...]  # (E, prompt, d[, cached]): d counts the token decoded now
    context_len: int
    seed: int

    def lines(self) -> list[str]:
        """The case, for a failure's diagnosis."""
        out = [f"  {self.model}: {self.heads} query heads, {self.kv_heads} KV heads, "
               f"head size {self.head_dim}, "
               f"scale {self.scale:g}; context_len {self.context_len}; content seed {self.seed}"]
        out += [f"  request {i}: encoder {r[0]}, prompt {r[1]}, decoder length at this step {r[2]}, "
                f"cached prefix {cached_prefix(r)}" for i, r in enumerate(self.batch)]
        return out

    def content(self) -> dict[str, list[torch.Tensor]]:
        """Per request: extend queries ``[prompt tokens the extend computes, H*D]``, the decode query
        ``[1, H*D]``, keys and values ``[E, KVH, D]``; N(0, 1) from :attr:`seed`."""
        gen = torch.Generator().manual_seed(self.seed)
        width = self.heads * self.head_dim

        def randn(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=gen, dtype=torch.float32)

        return {
            "q_extend": [randn(extended(r)[1], width) for r in self.batch],
            "q_decode": [randn(1, width) for _ in self.batch],
            "k": [randn(r[0], self.kv_heads, self.head_dim) for r in self.batch],
            "v": [randn(r[0], self.kv_heads, self.head_dim) for r in self.batch],
        }


def whisper_shape(heads: int, head_dim: int) -> tuple[int, int, int, float]:
    """``(E, heads, kv_heads, scale)`` from a ``WhisperConfig`` of ``heads`` heads of ``head_dim``."""
    import transformers

    config: Any = transformers.WhisperConfig(d_model=heads * head_dim, decoder_attention_heads=heads,
                                             encoder_attention_heads=heads)
    dim = config.d_model // config.decoder_attention_heads  # WhisperAttention's head_dim
    heads = config.decoder_attention_heads
    return config.max_source_positions, heads, heads, dim**-0.5


def mllama_config(heads: int, kv_heads: int, head_dim: int, vision: dict[str, int]) -> Any:
    """A ``MllamaConfig`` with a tiny text model (``heads`` heads, ``kv_heads`` KV heads) and ``vision``."""
    import transformers

    text = {"hidden_size": heads * head_dim, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
            "intermediate_size": 2 * heads * head_dim, "num_hidden_layers": 1}
    return transformers.MllamaConfig(text_config=text, vision_config=vision)


def mllama_tile_tokens(config: Any) -> tuple[int, int]:
    """``(tokens per tile, max tiles)`` of a ``MllamaConfig``'s vision model (a patch grid plus CLS)."""
    vision = config.vision_config
    return (vision.image_size // vision.patch_size) ** 2 + 1, vision.max_num_tiles


@st.composite
def softmax_scales(draw: st.DrawFn, model_scale: float) -> float:
    """The layer's softmax scale: the model's (``head_dim ** -0.5``, as Whisper and Mllama set it), T5's
    unscaled ``1.0``, half or twice the model's, or any in ``[0.05, 2]``."""
    return draw(st.sampled_from((model_scale, 1.0, model_scale / 2, model_scale * 2)) | st.floats(0.05, 2.0),
                label="softmax_scale")


@st.composite
def request_tokens(draw: st.DrawFn, e: int, i: int) -> tuple[int, int, int, int]:
    """``(E, prompt, d, cached)`` for one request of ``e`` encoder tokens: 1 to 12 prompt tokens, 1 to 4
    decoded, and a cached prefix of none, or the encoder and up to all but one prompt token."""
    prompt = draw(st.integers(1, 3) | st.integers(4, 12), label=f"prompt[{i}]")
    d = prompt + draw(st.integers(1, 4), label=f"decoded[{i}]")
    cached = 0
    if draw(st.booleans(), label=f"prefix cached[{i}]"):
        cached = e + draw(st.integers(0, prompt - 1), label=f"cached prompt tokens[{i}]")
    return e, prompt, d, cached


@st.composite
def attention_cases(draw: st.DrawFn, model: str | None = None) -> AttentionCase:
    """A Whisper or Mllama batch of 1 to 3 requests (several, of different lengths, more often than not),
    with several prompt tokens each, cached prefixes, and the model's softmax scale or another."""
    model = model or draw(st.sampled_from(MODELS), label="model")
    heads = draw(st.integers(1, 4), label="heads")
    head_dim = draw(st.sampled_from(HEAD_DIMS), label="head_dim")
    n = draw(st.integers(1, 3), label="requests")
    if model == "whisper":
        e, heads, kv_heads, scale = whisper_shape(heads, head_dim)
        encoders = [e] * n
    else:
        kv_heads = draw(st.sampled_from([k for k in range(1, heads + 1) if heads % k == 0]), label="kv_heads")
        vision = draw(st.sampled_from(({}, LLAMA_32_VISION)), label="vision_config")
        config = mllama_config(heads, kv_heads, head_dim, dict(vision))
        text = config.text_config
        heads, kv_heads = text.num_attention_heads, text.num_key_value_heads
        scale = (text.hidden_size // text.num_attention_heads) ** -0.5  # MllamaTextCrossAttention's scaling
        per_tile, max_tiles = mllama_tile_tokens(config)
        encoders = [per_tile * draw(st.integers(1, max_tiles), label=f"tiles[{i}]") for i in range(n)]
    scale = draw(softmax_scales(scale))
    batch = [draw(request_tokens(e, i)) for i, e in enumerate(encoders)]
    slack = draw(st.integers(0, 64), label="context_slack")
    context_len = max(e + d for e, _p, d, _c in batch) + slack
    event(f"model {model}")
    if n > 1:
        event("several requests" + (", different encoder lengths" if len(set(encoders)) > 1 else ""))
    if kv_heads != heads:
        event("grouped-query KV heads")
    if any(c for *_, c in batch):
        event("a cached prefix")
    if max(p for _e, p, _d, _c in batch) > 3:
        event("more than 3 prompt tokens")
    return AttentionCase(model, heads, kv_heads, head_dim, scale, tuple(batch), context_len,
                         draw(st.integers(0, 2**31 - 1), label="seed"))
