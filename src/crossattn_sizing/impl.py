"""The implementation under test: the kernels an engine runs on its block tables.

An implementation is any object with the four methods of :class:`Impl`
(documented for engine developers in docs/implementation-interface.md). The
harness owns the block tables, the caches and the guard; the implementation
only computes: slot mapping, KV write, paged attention and the DCP merge. Two
are built in:

- ``torch``: vectorised torch (:mod:`crossattn_sizing.slot_mapping`,
  :mod:`crossattn_sizing.attention`);
- ``triton``: Triton kernels (:mod:`crossattn_sizing.triton_kernels`) for slot
  mapping, KV write and paged attention, compiled on CUDA and interpreted on
  CPU (``TRITON_INTERPRET=1`` is set by :func:`load_impl` before the kernels are
  imported); the DCP merge is the torch one.

A user's own is named ``module:attr``, where ``attr`` is a callable taking the
``torch.device`` and returning the implementation (a class works).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import torch

from crossattn_sizing.attention import lse_merge, torch_paged_attention, torch_write_kv
from crossattn_sizing.callables import load_callable
from crossattn_sizing.devices import require_device
from crossattn_sizing.errors import DeviceError, HarnessError, PolicyLoadError
from crossattn_sizing.slot_mapping import SlotLayout, torch_slot_mapping
from crossattn_sizing.step import AttentionStep

REQUIRED_METHODS = ("slot_mapping", "write_kv", "paged_attention", "merge")
PAGED_ATTENTION_KEYWORDS = ("query", "key_cache", "value_cache", "step")
"""The keywords the harness calls ``paged_attention`` with."""


@runtime_checkable
class Impl(Protocol):
    """What the harness calls. Shapes and dtypes are fixed by the harness, see the docs file."""

    name: str
    device: torch.device

    def slot_mapping(
        self,
        table: torch.Tensor,
        row_stride: int,
        req_rows: torch.Tensor,
        query_start_loc: torch.Tensor,
        positions: torch.Tensor,
        layout: SlotLayout,
        out: torch.Tensor,
    ) -> None:
        """Fill ``out`` (int64) with each token's slot, then -1 up to its end."""
        ...

    def write_kv(
        self,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        slots: torch.Tensor,
    ) -> None:
        """Store token ``t``'s key/value at ``slots[t]``; -1 stores nothing."""
        ...

    def paged_attention(
        self, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """fp32 ``(out [Q, H, D], lse [Q, H])`` of each query over its request's keys on this rank.

        Called by keyword (``query=, key_cache=, value_cache=, step=``); ``step``
        carries the table and the step's metadata (:class:`AttentionStep`).
        """
        ...

    def merge(self, outs: Sequence[torch.Tensor], lses: Sequence[torch.Tensor]) -> torch.Tensor:
        """Combine per-rank partials into the fp32 output."""
        ...


class TorchImpl:
    """The vectorised torch implementation, on CPU or CUDA."""

    name = "torch"

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)

    def slot_mapping(
        self,
        table: torch.Tensor,
        row_stride: int,
        req_rows: torch.Tensor,
        query_start_loc: torch.Tensor,
        positions: torch.Tensor,
        layout: SlotLayout,
        out: torch.Tensor,
    ) -> None:
        torch_slot_mapping(table, row_stride, req_rows, query_start_loc, positions, layout, out)

    def write_kv(
        self,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        slots: torch.Tensor,
    ) -> None:
        torch_write_kv(key_cache, value_cache, key, value, slots)

    def paged_attention(
        self, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return torch_paged_attention(query, key_cache, value_cache, step)

    def merge(self, outs: Sequence[torch.Tensor], lses: Sequence[torch.Tensor]) -> torch.Tensor:
        return lse_merge(outs, lses)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={str(self.device)!r})"


class TritonImpl:
    """Triton kernels for slot mapping, KV write and paged attention; the torch merge (``lse_merge``)."""

    name = "triton"

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self._kernels = import_triton_kernels(self.device)

    def slot_mapping(
        self,
        table: torch.Tensor,
        row_stride: int,
        req_rows: torch.Tensor,
        query_start_loc: torch.Tensor,
        positions: torch.Tensor,
        layout: SlotLayout,
        out: torch.Tensor,
    ) -> None:
        self._kernels.triton_slot_mapping(
            table, row_stride, req_rows, query_start_loc, positions, layout, out
        )

    def write_kv(
        self,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        slots: torch.Tensor,
    ) -> None:
        self._kernels.triton_write_kv(key_cache, value_cache, key, value, slots)

    def paged_attention(
        self, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self._kernels.triton_paged_attention(query, key_cache, value_cache, step)

    def merge(self, outs: Sequence[torch.Tensor], lses: Sequence[torch.Tensor]) -> torch.Tensor:
        return lse_merge(outs, lses)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={str(self.device)!r})"


def import_triton_kernels(device: torch.device):  # type: ignore[no-untyped-def]
    """Import the Triton kernels built for ``device``: interpreted on CPU, compiled on CUDA.

    ``@triton.jit`` reads ``TRITON_INTERPRET`` when the kernels module is
    imported, so for CPU the variable is set first (it stays set for the
    process: later Triton kernels are interpreted too, which is what a CPU run
    needs). A module already imported the other way is refused with the reason.
    """
    if device.type == "cpu":
        value = os.environ.get("TRITON_INTERPRET")
        if value is not None and value.strip().lower() in ("0", "false", "off", "no"):
            raise PolicyLoadError(
                f"implementation 'triton' on cpu needs Triton's interpreter, but TRITON_INTERPRET={value!r}"
            )
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        from crossattn_sizing import triton_kernels
    except ImportError as exc:
        raise PolicyLoadError(
            f"implementation 'triton': triton does not import ({exc}); install the 'triton' extra"
        ) from exc
    if device.type == "cpu" and not triton_kernels.INTERPRETED:
        raise PolicyLoadError(
            "implementation 'triton' on cpu: the kernels were already imported compiled (without "
            "TRITON_INTERPRET=1); set TRITON_INTERPRET=1 before the run starts"
        )
    if device.type == "cuda" and triton_kernels.INTERPRETED:
        raise PolicyLoadError(
            "implementation 'triton' on cuda: TRITON_INTERPRET is set, so the kernels would be "
            "interpreted instead of compiled; unset it"
        )
    return triton_kernels


BUILTIN_IMPLS: dict[str, Callable[[torch.device], Impl]] = {
    "torch": TorchImpl,
    "triton": TritonImpl,
}


def old_paged_attention_form(impl: object) -> str | None:
    """Why ``impl.paged_attention`` cannot be called the current way, or None when it can.

    The harness calls ``paged_attention(query=, key_cache=, value_cache=, step=)``.
    An implementation written to the earlier interface (eleven positional
    arguments: ``table, row_stride, ..., scale``) is refused when it loads, with
    the change to make, rather than failing with a TypeError in the first step.
    """
    try:
        params = inspect.signature(impl.paged_attention).parameters  # type: ignore[attr-defined]
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read, let the run tell
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    missing = [n for n in PAGED_ATTENTION_KEYWORDS if n not in params]
    if not missing:
        return None
    return (
        f"{type(impl).__name__}.paged_attention({', '.join(params)}) does not take "
        f"{', '.join(missing)}: the harness calls paged_attention(query=, key_cache=, value_cache=, "
        "step=) with an AttentionStep (crossattn_sizing.step) holding table, row_stride, "
        "query_start_loc, seq_lens, query_positions, layout, causal and scale (see "
        "docs/implementation-interface.md)"
    )


def load_impl(spec: str, device: str | torch.device = "cpu") -> Impl:
    """The implementation named by ``spec`` (``torch``, ``triton`` or ``module:attr``) on ``device``.

    Every way this can go wrong (unknown name, module that does not import,
    factory that raises, object without the required methods, device not
    available) becomes one :class:`~crossattn_sizing.errors.HarnessError`.
    """
    try:
        dev = torch.device(device)
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise DeviceError(f"--device {str(device)!r}: use cpu or cuda")
    require_device(dev.type)
    if spec.strip() == "vllm" or spec.strip().startswith("vllm=="):  # the release's own kernels
        from crossattn_sizing.engine.vllm import load_engine_impl

        factory = lambda d: load_engine_impl(spec, d)  # noqa: E731
    else:
        factory = load_callable(spec, BUILTIN_IMPLS, "implementation")
    try:
        impl = factory(dev)
    except HarnessError:
        raise
    except Exception as exc:  # a user's factory failing is their spec's problem, said once
        raise PolicyLoadError(
            f"implementation {spec!r}: creating it for device {dev} raised {type(exc).__name__}: {exc}"
        ) from exc
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(impl, m, None))]
    if missing:
        raise PolicyLoadError(
            f"implementation {spec!r}: {type(impl).__name__} lacks {', '.join(missing)} "
            "(see docs/implementation-interface.md)"
        )
    old_form = old_paged_attention_form(impl)
    if old_form is not None:
        raise PolicyLoadError(f"implementation {spec!r}: {old_form}")
    if not hasattr(impl, "device"):
        impl.device = dev  # type: ignore[attr-defined]
    if not isinstance(getattr(impl, "name", None), str):
        impl.name = spec  # type: ignore[attr-defined]
    return impl  # type: ignore[return-value]
