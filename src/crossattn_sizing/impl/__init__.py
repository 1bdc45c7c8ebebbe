"""The implementation under test: the kernels an engine runs on its block tables.

An implementation is any object with the four methods of :class:`Impl`
(documented for engine developers in docs/implementation-interface.md). The
harness owns the block tables, the caches and the guard; the implementation
only computes: slot mapping, KV write, paged attention and the DCP merge, each
reading the step's metadata from one frozen record of :mod:`crossattn_sizing.impl.step`.
Two are built in:

- ``torch``: vectorised torch (:mod:`crossattn_sizing.impl.slot_mapping`,
  :mod:`crossattn_sizing.impl.attention`);
- ``triton``: Triton kernels (:mod:`crossattn_sizing.impl.triton_kernels`) for slot
  mapping, KV write and paged attention, compiled on CUDA and interpreted on
  CPU (``TRITON_INTERPRET=1`` is set by :func:`impl_from_spec` before the kernels are
  imported); the DCP merge is the torch one.

A user's own is named ``module:attr``, where ``attr`` is a callable taking the
``torch.device`` and returning the implementation (a class works).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Protocol, runtime_checkable

import torch

from crossattn_sizing.base import usercode
from crossattn_sizing.base.callables import load_callable
from crossattn_sizing.base.devices import require_device
from crossattn_sizing.base.errors import DeviceError, HarnessError, PolicyLoadError
from crossattn_sizing.impl.attention import lse_merge, torch_paged_attention, torch_write_kv
from crossattn_sizing.impl.slot_mapping import torch_slot_mapping
from crossattn_sizing.impl.step import AttentionStep, SlotStep, WriteStep

REQUIRED_METHODS = ("slot_mapping", "write_kv", "paged_attention", "merge")


@runtime_checkable
class Impl(Protocol):
    """What the harness calls, every method by keyword; shapes and dtypes are in the docs file.

    Each kernel's metadata for the step comes as one frozen record, ``step``
    (:mod:`crossattn_sizing.impl.step`); the tensors it computes on and the buffers
    it writes are keywords beside it. The keywords of these signatures are the
    ones the harness passes (:data:`CALL_KEYWORDS` is read from them).
    """

    name: str
    device: torch.device

    def slot_mapping(self, *, step: SlotStep, out: torch.Tensor) -> None:
        """Fill ``out`` (int64) with each token's slot, then -1 up to its end."""
        ...

    def write_kv(
        self, *, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
        step: WriteStep,
    ) -> None:
        """Store token ``t``'s key/value at ``step.slots[t]``; -1 stores nothing."""
        ...

    def paged_attention(
        self, *, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """fp32 ``(out [Q, H, D], lse [Q, H])`` of each query over its request's keys on this rank."""
        ...

    def merge(self, *, outs: Sequence[torch.Tensor], lses: Sequence[torch.Tensor]) -> torch.Tensor:
        """Combine per-rank partials into the fp32 output."""
        ...


CALL_KEYWORDS: dict[str, tuple[str, ...]] = {
    method: tuple(inspect.signature(getattr(Impl, method)).parameters)[1:] for method in REQUIRED_METHODS
}
"""The keywords the harness calls each method with, read from :class:`Impl` so the two cannot part."""

STEP_RECORDS: dict[str, type] = {
    method: hints["step"]
    for method in REQUIRED_METHODS
    if "step" in (hints := typing.get_type_hints(getattr(Impl, method)))
}
"""The step record each method receives as ``step`` (``merge`` has none)."""


class TorchImpl:
    """The vectorised torch implementation, on CPU or CUDA.

    Its methods are the torch functions themselves, whose parameters are the
    interface's keywords: an implementation is composed of kernels, and one of
    your own can take any of these the same way (``write_kv =
    staticmethod(torch_write_kv)``) and write only the kernel it tests.
    """

    name = "torch"
    slot_mapping = staticmethod(torch_slot_mapping)
    write_kv = staticmethod(torch_write_kv)
    paged_attention = staticmethod(torch_paged_attention)
    merge = staticmethod(lse_merge)

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={str(self.device)!r})"


class TritonImpl:
    """Triton kernels for slot mapping, KV write and paged attention; the torch merge (``lse_merge``)."""

    name = "triton"
    merge = staticmethod(lse_merge)

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self._kernels = import_triton_kernels(self.device)

    def slot_mapping(self, *, step: SlotStep, out: torch.Tensor) -> None:
        """Slot mapping by the Triton kernel."""
        self._kernels.triton_slot_mapping(step, out)

    def write_kv(
        self, *, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
        step: WriteStep,
    ) -> None:
        """The KV write by the Triton kernel."""
        self._kernels.triton_write_kv(key, value, key_cache, value_cache, step)

    def paged_attention(
        self, *, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Paged attention by the Triton kernel: ``(out, lse)``."""
        out: tuple[torch.Tensor, torch.Tensor] = self._kernels.triton_paged_attention(
            query, key_cache, value_cache, step
        )
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device={str(self.device)!r})"


def import_triton_kernels(device: torch.device) -> types.ModuleType:
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
        from crossattn_sizing.impl import triton_kernels
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


def keyword_call_problems(impl: object) -> list[str]:
    """Why the harness cannot call ``impl``'s methods by keyword the current way (empty when it can).

    The harness calls every method by keyword (:data:`CALL_KEYWORDS`), a
    kernel's step metadata in one record. An implementation written to an
    earlier interface (``slot_mapping(table, row_stride, ..., out)``,
    ``write_kv(key_cache, value_cache, key, value, slots)``, ``paged_attention``
    with eleven positional arguments) is refused when it loads, each method
    named with the call it must accept, rather than failing with a TypeError in
    the first step.
    """
    problems = []
    for method, keywords in CALL_KEYWORDS.items():
        try:
            params = inspect.signature(getattr(impl, method)).parameters
        except (TypeError, ValueError):  # a builtin or C callable: nothing to read, let the run tell
            continue
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        missing = [k for k in keywords if k not in params or params[k].kind is params[k].POSITIONAL_ONLY]
        unpassed = [n for n, p in params.items() if n not in keywords and p.default is p.empty
                    and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if missing and not takes_any:
            wrong = f"does not take {', '.join(missing)}"
        elif unpassed:
            wrong = f"needs {', '.join(unpassed)}, which the harness does not pass"
        else:
            continue
        call = f"{method}({', '.join(f'{k}=' for k in keywords)})"
        record = STEP_RECORDS.get(method)
        if record is not None:
            held = ", ".join(f.name for f in fields(record))
            call += f" with step: {record.__name__} (crossattn_sizing.impl.step) holding {held}"
        signature = f"{type(impl).__name__}.{method}({', '.join(params)})"
        problems.append(f"{signature} {wrong}: the harness calls {call}")
    return problems


def provenance_lines(impl: object) -> list[str]:
    """``step: function`` per kernel for an implementation that says whose code runs (``vllm==X``).

    Printed in the pytest header and by ``verify`` so that a verdict says which
    engine functions it is about; empty for an implementation that does not say.
    """
    lines = getattr(impl, "provenance_lines", None)
    return list(lines()) if callable(lines) else []


def impl_from_spec(
    spec: str, device: str | torch.device = "cpu", factory: Callable[[torch.device], object] | None = None
) -> Impl:
    """The implementation named by ``spec`` (``torch``, ``triton`` or ``module:attr``) on ``device``.

    Every way this can go wrong (unknown name, module that does not import,
    factory that raises, object without the required methods, device not
    available) becomes one :class:`~crossattn_sizing.base.errors.HarnessError`.
    ``factory``, when given, builds the implementation instead of the name's
    callable, checked the same way: :func:`crossattn_sizing.specs.resolve.load_impl`
    passes an engine release's (``vllm==X``), so this module knows no engine.
    """
    try:
        dev = torch.device(device)
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise DeviceError(f"--device {str(device)!r}: use cpu or cuda")
    require_device(dev.type)
    if factory is None:
        factory = load_callable(spec, BUILTIN_IMPLS, "implementation")
    # A user's factory failing (sys.exit and a KeyboardInterrupt no Ctrl-C caused included) is
    # their spec's problem, said once.
    impl = usercode.call(factory, dev, what=f"implementation {spec!r}: creating it for device {dev}",
                         passthrough=(HarnessError,))  # fmt: skip
    missing = [m for m in REQUIRED_METHODS if not callable(getattr(impl, m, None))]
    if missing:
        raise PolicyLoadError(
            f"implementation {spec!r}: {type(impl).__name__} lacks {', '.join(missing)} "
            "(see docs/implementation-interface.md)"
        )
    problems = keyword_call_problems(impl)
    if problems:
        raise PolicyLoadError(
            f"implementation {spec!r}: {'; '.join(problems)} (see docs/implementation-interface.md)"
        )
    for method in REQUIRED_METHODS:  # its kernels may not leave the process or fake a Ctrl-C either
        with contextlib.suppress(AttributeError, TypeError):  # __slots__: called unguarded
            guarded = usercode.guard_method(getattr(impl, method), f"implementation {spec!r}: {method}")
            setattr(impl, method, guarded)
    if not hasattr(impl, "device"):
        impl.device = dev
    name = getattr(impl, "name", None)
    # A user's subclass of a built-in inherits its name: reported as the built-in, its failures would
    # replay the built-in (which passes). It is named by the spec the user typed instead.
    inherited = isinstance(name, str) and name in BUILTIN_IMPLS and spec != name
    if not isinstance(name, str) or inherited:
        with contextlib.suppress(AttributeError, TypeError):  # __slots__ or a read-only property
            impl.name = spec
    return typing.cast(Impl, impl)
