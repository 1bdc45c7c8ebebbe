"""Tensors over the worker protocol: dtype, shape and the raw bytes (base64), so NaN and bf16 cross intact.

The KV write, attention and merge run in the release's worker process; their
inputs and results travel as JSON lines. Raw bytes (not lists of floats) keep
the NaN poison of the caches, signed zeros and bfloat16 (which numpy lacks)
exactly as the harness made them.
"""

from __future__ import annotations

import base64
import dataclasses
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


def encode_record(value: Any) -> dict[str, Any]:
    """A kernel's argument as the protocol sends it: a tensor, a step record (fields in turn), a list
    of them, or a plain value. What the judge hands a user's kernel in its worker crosses this way."""
    if isinstance(value, torch.Tensor):
        return {"tensor": encode(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: encode_record(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"record": type(value).__name__, "fields": fields}
    if isinstance(value, (list, tuple)):
        return {"list": [encode_record(v) for v in value]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise TypeError(f"{type(value).__name__} cannot cross the worker protocol")


def _record_types() -> dict[str, type]:
    from crossattn_sizing.core.slot_layout import SlotLayout
    from crossattn_sizing.impl.step import AttentionStep, SlotStep, WriteStep

    return {t.__name__: t for t in (SlotStep, WriteStep, AttentionStep, SlotLayout)}


def decode_record(data: dict[str, Any], device: torch.device | str = "cpu") -> Any:
    """The value :func:`encode_record` wrote (records rebuilt as their own class, tensors on ``device``)."""
    if "tensor" in data:
        return decode(data["tensor"], device)
    if "record" in data:
        fields = {name: decode_record(v, device) for name, v in data["fields"].items()}
        return _record_types()[data["record"]](**fields)
    if "list" in data:
        return [decode_record(v, device) for v in data["list"]]
    return data["value"]


def record_parts(name: str, value: Any) -> list[tuple[str, Any]]:
    """Each tensor and plain field of an argument with its path (``step.slots``, ``outs[1]``)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [part for f in dataclasses.fields(value)
                for part in record_parts(f"{name}.{f.name}", getattr(value, f.name))]  # fmt: skip
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in record_parts(f"{name}[{i}]", v)]
    return [(name, value)]


class Foreign:
    """What a kernel in a worker returned that is not a tensor: its type's name and a short repr."""

    def __init__(self, type_name: str, said: str) -> None:
        self.type_name, self.said = type_name, said

    def __repr__(self) -> str:
        return f"<{self.type_name}: {self.said}>"


def encode_answer(answer: Any) -> dict[str, Any]:
    """A kernel's return value: tensors, a tuple or list of a few, or what else it was (type and repr)."""
    if isinstance(answer, torch.Tensor) and str(answer.dtype) in DTYPES:
        return {"tensor": encode(answer)}
    if isinstance(answer, tuple) and len(answer) <= 4:
        return {"tuple": [encode_answer(a) for a in answer]}
    try:
        said = repr(answer)[:120]
    except Exception:
        said = "?"
    return {"foreign": type(answer).__name__, "said": said}


def decode_answer(data: dict[str, Any], device: torch.device | str = "cpu") -> Any:
    """The value :func:`encode_answer` wrote; a non-tensor comes back as a :class:`Foreign`."""
    if "tensor" in data:
        return decode(data["tensor"], device)
    if "tuple" in data:
        return tuple(decode_answer(a, device) for a in data["tuple"])
    return Foreign(data["foreign"], data["said"])
