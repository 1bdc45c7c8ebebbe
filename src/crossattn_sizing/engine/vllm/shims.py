"""The CPU compatibility layer: what a release needs changed to run its code on a machine with no GPU.

Why in one module: everything the harness replaces in a release is listed in
:data:`CPU_SHIMS`, and each item is applied here and reported by name in the
worker's ready line (or when the kernels are first looked up), so a reader can
see exactly how far a CPU run departs from the engine as shipped. Nothing else
of the engine is replaced. Every function imports what it patches when called:
the release is only importable inside the worker, from its ``sys.path``.
"""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Any

CPU_SHIMS = {
    "env:TRITON_INTERPRET=1": "Triton kernels run in Triton's CPU interpreter (set before import)",
    "env:CUDA_VISIBLE_DEVICES=": "no CUDA device: vLLM keeps the real Triton (set before import)",
    "buffer_utils.UvaBuffer": "pinned host buffer with a device view (needs CUDA and _C) -> a plain CPU "
    "tensor that is its own view",
    "torch_utils.PIN_MEMORY=False": "host-to-device copies without pinned memory "
    "(no pinned allocator on CPU)",
    "importlib.metadata.version('vllm')": "a source tree (vllm@PATH) has no installed distribution, and "
    "vLLM reads its own version to decide whether Triton is usable (else it swaps in a placeholder): "
    "answered with the tree's vllm/_version.py, or 0+tree",
    "torch.cuda.get_device_capability=(9, 0)": "the KV-write launcher picks its tile size by GPU "
    "generation; with no GPU it is told a Hopper's (the tile changes how the work is split, not what is "
    "written)",
    "triton InterpretedFunction.constexprs": "0.34's DCP correction launcher counts its kernel's "
    "constexpr parameters, which a compiled kernel lists and the interpreter's stand-in does not: given "
    "the positions of the parameters annotated tl.constexpr, as the compiled kernel has them",
}
"""Every shim by the name the worker reports, and why it is needed. The tree-version answer is
applied on any device, by :func:`crossattn_sizing.engine.vllm.quirks.answer_tree_version`."""

ENVIRONMENT = {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
"""Set before the release is imported: what it reads at import time decides which Triton it keeps."""


def set_cpu_environment() -> list[str]:
    """Set :data:`ENVIRONMENT` (before ``import vllm``); the shims' names, as reported."""
    os.environ.update(ENVIRONMENT)
    return [f"env:{name}={value}" for name, value in ENVIRONMENT.items()]


def cpu_buffers(torch: Any, buffer_utils: Any) -> list[str]:
    """Host buffers without CUDA: ``UvaBuffer`` a CPU tensor that is its own view, no pinned memory.

    Returns the names of the shims applied (``PIN_MEMORY`` only where the release sets it).
    """
    real = buffer_utils.UvaBuffer
    view_is_method = callable(getattr(real, "uva", None))  # 0.34: uva(n) over a _uva tensor

    class CpuUvaBuffer(real):  # type: ignore[misc, valid-type]
        """The release's UvaBuffer with only its constructor replaced: the host tensor is its own view."""

        def __init__(self, size: Any, dtype: Any) -> None:
            self.cpu = torch.zeros(size, dtype=dtype, device="cpu")
            self.np = self.cpu.numpy()
            if view_is_method:
                self._uva = self.cpu
            else:
                self.uva = self.cpu

    buffer_utils.UvaBuffer = CpuUvaBuffer
    applied = ["buffer_utils.UvaBuffer"]
    torch_utils = importlib.import_module("vllm.utils.torch_utils")
    if getattr(torch_utils, "PIN_MEMORY", False):
        torch_utils.PIN_MEMORY = False  # type: ignore[attr-defined]
        applied.append("torch_utils.PIN_MEMORY=False")
    return applied


def cpu_kernels(torch: Any) -> list[str]:
    """What the release's kernel launchers read of a GPU, answered on CPU; the names of the shims applied.

    Applied when the kernels are first looked up, not at start-up: a worker
    that only sizes never needs them.
    """
    torch.cuda.get_device_capability = lambda device=None: (9, 0)
    applied = ["torch.cuda.get_device_capability=(9, 0)"]
    if _interpreter_constexprs():
        applied.append("triton InterpretedFunction.constexprs")
    return applied


def _interpreter_constexprs() -> bool:
    """Give Triton's ``InterpretedFunction`` the ``constexprs`` list a compiled kernel has (if it lacks one).

    The positions of the parameters annotated ``tl.constexpr``, as Triton's
    ``JITFunction`` computes them. Only 0.34's DCP launcher reads it (to count
    them); without it that launcher stops with an ``AttributeError`` on CPU.
    """
    from triton.runtime.interpreter import InterpretedFunction

    if hasattr(InterpretedFunction, "constexprs"):
        return False

    def constexprs(self: Any) -> list[int]:
        params = inspect.signature(self.fn).parameters.values()
        return [i for i, p in enumerate(params) if "constexpr" in str(p.annotation)]

    InterpretedFunction.constexprs = property(constexprs)
    return True
