"""How SGLang's attention step's tensors travel between the judge and a tree's worker.

The content (queries, the encoder's keys and values) is drawn by the judge and
travels to the worker packed as float32 bytes (a Whisper or Mllama batch holds
thousands of encoder tokens: as JSON numbers it would be several MB a call).
The worker runs the release's own ``TorchNativeAttnBackend``
(:mod:`crossattn_sizing.engine.sglang.attention`) and answers its outputs; the
judge (:class:`crossattn_sizing.engine.sglang.client.SglangAttention`) compares them with
the reference. Only :func:`unpack` imports torch, and only when called.
"""

from __future__ import annotations

import base64
from array import array
from collections.abc import Sequence
from typing import Any


def pack(values: Sequence[float]) -> str:
    """Floats as base64 float32 bytes (what :func:`unpack` reads)."""
    return base64.b64encode(array("f", values).tobytes()).decode("ascii")


def unpack(text: str, shape: tuple[int, ...]) -> Any:
    """:func:`pack`'s text as a float32 tensor of ``shape`` (imports torch: the worker's side)."""
    import torch

    raw = bytearray(base64.b64decode(text))
    return torch.frombuffer(raw, dtype=torch.float32).reshape(shape) if raw else torch.zeros(
        0, dtype=torch.float32).reshape(shape)
