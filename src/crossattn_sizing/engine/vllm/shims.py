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
    "triton interpreter: tl patched once per launch": "Triton's interpreter patches triton.language "
    "into its interpreted form at each launch and again at every call of a @triton.jit helper inside "
    "it (never undoing the inner patch); the inner patch re-installs what the launch already installed, "
    "so it is skipped where the helper sees no language module the launch did not patch (a quarter of "
    "a unified_attention call's CPU time; nothing the kernels compute changes)",
    "triton interpreter: no dead overflow check": "with debug off, Triton builds an int32 add/sub/mul's "
    "overflow condition and hands it to device_assert, which drops it (a compiled kernel's dead code, "
    "removed by the compiler); the interpreter executes it in numpy for every scalar op, so it is skipped "
    "where debug is off (a third of the one-program-per-token KV write's CPU time; nothing computed changes)",
    "triton interpreter: numpy dtype looked up once": "the interpreter maps a Triton type to its numpy "
    "dtype by building a 19-entry table at every call; each distinct type's answer is kept after its "
    "first call (the answer depends on the type alone)",
}
"""Every shim by the name the worker reports, and why it is needed. Two more are applied on any
device: the tree-version answer, by :func:`crossattn_sizing.engine.vllm.quirks.answer_tree_version`,
and the sizing's copy of its config, :data:`crossattn_sizing.engine.vllm.release.FRESH_COPY`."""

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
    if _patch_once_per_launch():
        applied.append("triton interpreter: tl patched once per launch")
    if _no_dead_overflow_check():
        applied.append("triton interpreter: no dead overflow check")
    if _np_dtype_once():
        applied.append("triton interpreter: numpy dtype looked up once")
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


def _patch_once_per_launch() -> bool:
    """Skip the interpreter's re-patching of ``triton.language`` at each helper call inside a launch.

    ``GridExecutor.__call__`` (a launch) patches the language modules its
    kernel's globals hold (``tl``, ``tl.core``), runs every program, then
    restores them. ``InterpretedFunction.__call__`` (a ``@triton.jit`` helper
    called by a program: the tree's own, or Triton's ``tl.sum``/``tl.cdiv``,
    whose globals hold ``tl.core``) patches the modules its globals hold again
    and drops that patch's scope, so nothing undoes it before the launch
    ends. Once a module has been patched during a launch, patching it again
    finds the builtins already replaced (they are not wrapped twice) and sets
    the other attributes to equivalent functions: a no-op that costs
    ``inspect.getmembers`` over the language (2 s of a 7 s Nemotron-page
    ``unified_attention``). So within a launch, a helper call is patched as
    before unless every language module its globals hold was patched earlier
    in that launch; a helper that holds none (which the interpreter refuses)
    is patched as before too. Returns whether the shim was applied (once per
    process).
    """
    from triton.runtime import interpreter

    if getattr(interpreter, "_crossattn_patch_once", False):
        return False
    lang_modules = (interpreter.tl, interpreter.tl.core)
    real_patch, real_launch = interpreter._patch_lang, interpreter.GridExecutor.__call__
    patched: list[set[int]] = []  # per launch in progress: the language modules patched in it so far

    def patch_lang(fn: Any) -> Any:
        mine = {id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in lang_modules}
        if mine and patched and mine <= patched[-1]:
            return interpreter._LangPatchScope()  # patched earlier in this launch: nothing to do or undo
        scope = real_patch(fn)
        if patched:
            patched[-1] |= mine
        return scope

    def launch(self: Any, *args: Any, **kwargs: Any) -> Any:
        patched.append(set())
        try:
            return real_launch(self, *args, **kwargs)
        finally:
            patched.pop()

    interpreter._patch_lang = patch_lang
    interpreter.GridExecutor.__call__ = launch
    setattr(interpreter, "_crossattn_patch_once", True)  # noqa: B010  # a mark on Triton's module
    return True


def _no_dead_overflow_check() -> bool:
    """Skip the interpreter's integer-overflow check where nothing would read it (``debug`` off).

    For an int32 ``+``, ``-`` or ``*``, Triton's semantic layer recomputes the
    op in int64, compares it with the int32 bounds and hands the condition to
    ``device_assert``, which returns at once unless the options have
    ``debug`` on. A compiled kernel drops that dead code; the interpreter runs
    every step of it in numpy for every scalar op of every program (the KV
    write is one program per token). Only the interpreter's own semantic
    instance is changed, and with ``debug`` on the check runs as before.
    Returns whether the shim was applied (once per process).
    """
    from triton.runtime import interpreter

    semantic = interpreter.interpreter_semantic
    if getattr(semantic, "_crossattn_no_dead_check", False):
        return False
    real = semantic.binary_op_sanitize_overflow_impl

    def sanitize(lhs: Any, rhs: Any, binary_op: Any) -> Any:
        if not semantic.builder.options.debug:
            return None  # what device_assert would have done with the condition
        return real(lhs, rhs, binary_op)

    semantic.binary_op_sanitize_overflow_impl = sanitize
    setattr(semantic, "_crossattn_no_dead_check", True)  # noqa: B010  # a mark on Triton's object
    return True


def _np_dtype_once() -> bool:
    """Keep the interpreter's answer for each Triton type's numpy dtype after its first lookup.

    ``interpreter._get_np_dtype`` builds its table of 19 types (each hashed)
    at every call, and the interpreter calls it for most ops. The answer is a
    function of the type, and two types with the same class and spelling
    (``fp32``, ``pointer<fp32>``, ``<[16], int32>``) are the same type, so the
    key is the pair; a miss asks Triton's own function. Returns whether the
    shim was applied (once per process).
    """
    from triton.runtime import interpreter

    if getattr(interpreter, "_crossattn_np_dtype_once", False):
        return False
    real = interpreter._get_np_dtype
    known: dict[tuple[type, str], Any] = {}

    def get_np_dtype(tt_dtype: Any) -> Any:
        key = (type(tt_dtype), str(tt_dtype))
        if key not in known:
            known[key] = real(tt_dtype)
        return known[key]

    interpreter._get_np_dtype = get_np_dtype
    setattr(interpreter, "_crossattn_np_dtype_once", True)  # noqa: B010  # a mark on Triton's module
    return True
