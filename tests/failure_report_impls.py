"""Implementations whose failures must report in seconds, with bounded text (issue 45).

Held-out variants of the issue's case (an implementation that overwrites its input tensors): each
breaks the paged attention one way, so the property fails on (almost) every example, and the
failure path (Hypothesis's shrinking and explain phase, pytest's report of the failure) runs with
the attention's tensors in reach.
"""

from __future__ import annotations

import torch

from crossattn_sizing.impl import TorchImpl
from crossattn_sizing.impl.attention import torch_paged_attention
from crossattn_sizing.impl.step import AttentionStep


class ScalesOutputByTwo(TorchImpl):
    """The attention output doubled (a scale applied twice): a plain wrong answer."""

    def paged_attention(
        self, *, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out, lse = torch_paged_attention(query=query, key_cache=key_cache, value_cache=value_cache, step=step)
        return out * 2, lse


class WritesIntoKeyCache(TorchImpl):
    """Attends right, then scribbles over the key cache it was handed (inputs are read-only)."""

    def paged_attention(
        self, *, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        answer = torch_paged_attention(query=query, key_cache=key_cache, value_cache=value_cache, step=step)
        key_cache.mul_(-3.0)
        return answer
