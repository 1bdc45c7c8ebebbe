"""Tensors over the worker protocol: dtype, shape and the raw bytes (base64), so NaN and bf16 cross intact.

The KV write, attention and merge run in the release's worker process; their
inputs and results travel as JSON lines. Raw bytes (not lists of floats) keep
the NaN poison of the caches, signed zeros and bfloat16 (which numpy lacks)
exactly as the harness made them.
"""

from __future__ import annotations

import base64
from typing import Any

import torch

DTYPES = {
    str(d): d
    for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64,
              torch.uint8)
}


def encode(t: torch.Tensor) -> dict[str, Any]:
    """``{"dtype", "shape", "b64"}`` of a CPU copy of ``t`` (contiguous, any supported dtype)."""
    if str(t.dtype) not in DTYPES:
        raise TypeError(f"tensor of dtype {t.dtype} cannot cross the worker protocol")
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return {"dtype": str(t.dtype), "shape": list(t.shape), "b64": base64.b64encode(raw).decode("ascii")}


def decode(data: dict[str, Any], device: torch.device | str = "cpu") -> torch.Tensor:
    """The tensor :func:`encode` wrote, on ``device``."""
    dtype = DTYPES[data["dtype"]]
    raw = bytearray(base64.b64decode(data["b64"]))
    if not raw:
        return torch.zeros(data["shape"], dtype=dtype, device=device)
    flat = torch.frombuffer(raw, dtype=torch.uint8).view(dtype)
    return flat.reshape(data["shape"]).to(device)
