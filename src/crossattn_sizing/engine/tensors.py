"""Tensors over the worker protocol: dtype, shape and the raw bytes (base64), so NaN and bf16 cross intact.

The KV write, attention and merge run in the release's worker process; their
inputs and results travel as JSON lines. Raw bytes (not lists of floats) keep
the NaN poison of the caches, signed zeros and bfloat16 (which numpy lacks)
exactly as the harness made them.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable
from typing import Any

import torch

DTYPES = {
    str(d): d
    for d in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64,
              torch.uint8)
}


Encoders = tuple[Callable[[torch.Tensor], dict[str, Any]], Callable[[Any], dict[str, Any]]]


def bind_encoders() -> Encoders:
    """``(encode, encode_answer)`` with everything they call bound now, as locals of theirs.

    Why: a worker binds these before it imports the user's module, so code
    under test that rebinds ``torch.Tensor``'s methods, ``base64`` or the
    harness's own functions changes nothing of what the worker sends: the
    tensor's own facts (dtype, shape, device, ``requires_grad``) and raw bytes
    cross, and the judge alone reads them. A tensor subclass (whose methods
    are the user's) and a dtype the protocol lacks are sent as what they are,
    for the judge to refuse by name.
    """
    base: Any = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
    tensor_type, uint8, dtypes = torch.Tensor, torch.uint8, frozenset(DTYPES)
    detach, to, contiguous, reshape, view, numpy, numel = (
        base.detach, base.to, base.contiguous, base.reshape, base.view, base.numpy, base.numel)  # fmt: skip
    dtype_of, shape_of, device_of, grad_of = (
        base.dtype.__get__, base.shape.__get__, base.device.__get__, base.requires_grad.__get__)  # fmt: skip
    b64, type_, str_, list_, bool_, repr_, tuple_, len_, isinstance_ = (
        base64.b64encode, type, str, list, bool, repr, tuple, len, isinstance)  # fmt: skip

    def facts(t: torch.Tensor) -> dict[str, Any]:
        return {"dtype": str_(dtype_of(t)), "shape": list_(shape_of(t)), "device": str_(device_of(t)),
                "requires_grad": bool_(grad_of(t))}  # fmt: skip

    def encode(t: torch.Tensor) -> dict[str, Any]:
        if type_(t) is not tensor_type:
            raise TypeError(f"a {type_(t).__name__} (a tensor subclass) cannot cross the worker protocol")
        out = facts(t)
        if out["dtype"] not in dtypes:
            raise TypeError(f"tensor of dtype {out['dtype']} cannot cross the worker protocol")
        if device_of(t).type == "meta":  # no data to send: its facts say so
            return out
        flat = reshape(contiguous(to(detach(t), "cpu")), (-1,))
        raw = numpy(view(flat, uint8)).tobytes() if numel(flat) else b""
        out["b64"] = b64(raw).decode("ascii")
        return out

    def said(answer: Any) -> str:
        try:
            return str_(repr_(answer))[:120]
        except BaseException:  # a hostile __repr__: the type is still named
            return "?"

    def encode_answer(answer: Any) -> dict[str, Any]:
        if type_(answer) is tensor_type and str_(dtype_of(answer)) in dtypes:
            return {"tensor": encode(answer)}
        if type_(answer) is tuple_ and len_(answer) <= 4:
            return {"tuple": [encode_answer(a) for a in answer]}
        if isinstance_(answer, tensor_type):  # a subclass or an odd dtype: named with its facts
            return {"foreign": type_(answer).__name__, "said": said(answer), "facts": facts(answer)}
        return {"foreign": type_(answer).__name__, "said": said(answer)}

    return encode, encode_answer


encode, encode_answer = bind_encoders()
"""The harness's own pair (the judge's side, a release's worker); a user-code worker binds its own."""


def decode(data: dict[str, Any], device: torch.device | str = "cpu") -> torch.Tensor:
    """The tensor :func:`encode` wrote, on ``device`` (a ``meta`` one, which carries no data, on ``meta``)."""
    dtype = DTYPES[data["dtype"]]
    if "b64" not in data:
        return torch.empty(data["shape"], dtype=dtype, device="meta")
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

    def __init__(self, type_name: str, said: str, facts: dict[str, Any] | None = None) -> None:
        self.type_name, self.said, self.facts = type_name, said, facts

    def __repr__(self) -> str:
        return f"<{self.type_name}: {self.said}>"



def decode_answer(data: dict[str, Any], device: torch.device | str = "cpu") -> Any:
    """The value :func:`encode_answer` wrote; a non-tensor comes back as a :class:`Foreign`."""
    if "tensor" in data:
        return decode(data["tensor"], device)
    if "tuple" in data:
        return tuple(decode_answer(a, device) for a in data["tuple"])
    return Foreign(data["foreign"], data["said"], data.get("facts"))
