"""The judge's side of SGLang's attention step: ask a tree's worker to run one batch's cross-attention.

The content (queries, the encoder's keys and values) is drawn by the judge and
travels to the worker packed as float32 bytes (a Whisper or Mllama batch holds
thousands of encoder tokens: as JSON numbers it would be several MB a call).
The worker runs the release's own ``TorchNativeAttnBackend``
(:mod:`crossattn_sizing.engine.sglang.attention`) and answers its outputs; the
judge compares them with the reference. Nothing here imports torch.
"""

from __future__ import annotations

import base64
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crossattn_sizing.base.errors import ReleaseUnavailable


def pack(values: Sequence[float]) -> str:
    """Floats as base64 float32 bytes (what :func:`unpack` reads)."""
    return base64.b64encode(array("f", values).tobytes()).decode("ascii")


def unpack(text: str, shape: tuple[int, ...]) -> Any:
    """:func:`pack`'s text as a float32 tensor of ``shape`` (imports torch: the worker's side)."""
    import torch

    raw = bytearray(base64.b64decode(text))
    return torch.frombuffer(raw, dtype=torch.float32).reshape(shape) if raw else torch.zeros(
        0, dtype=torch.float32).reshape(shape)


@dataclass
class SglangAttention:
    """The attention step of one SGLang tree: its own TorchNativeAttnBackend on a batch, in its worker."""

    spec: str
    deadline: float | None = None
    """Seconds each call into the tree may take (``--call-timeout``); None: the worker's own."""

    pack = staticmethod(pack)
    """How the payload's tensors travel (the property packs its content with it)."""

    @property
    def name(self) -> str:
        """How reports name the tree: its spec."""
        return self.spec

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The worker's answer: ``ran`` with the outputs, ``fails`` (the release's extend output is not the
        draw's, or its code did not return within the deadline) or ``not run`` with the reason."""
        from crossattn_sizing.engine.client import EngineCrash
        from crossattn_sizing.engine.sglang.client import sglang_worker

        try:
            return sglang_worker(self.spec, self.deadline).ask("attention", **payload)
        except EngineCrash as exc:  # the tree's own code hung (its step and the deadline named) or left
            from crossattn_sizing.engine.sglang.client import did_not_return

            return did_not_return(exc)
        except ReleaseUnavailable as exc:  # the worker answered with an error: the adapter's, not run
            return {"verdict": "not run", "reason": f"the worker could not answer: {exc}"}
