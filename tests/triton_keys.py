"""The specialisation keys the Triton compiler would use for the harness's kernels, computed on CPU.

Why: on a GPU Triton compiles one kernel per distinct key, and the key holds,
beside the ``constexpr`` values, a pattern of every integer argument (1 is
made a constant, a multiple of 16 gets a divisibility hint) unless the kernel
lists it in ``do_not_specialize``. Under ``TRITON_INTERPRET=1`` nothing is
compiled, so the count cannot be read from a cache; it is computed here the
way ``triton.runtime.jit`` (Triton 3.x) does before it looks a kernel up:
``create_function_from_signature`` builds the binder from the kernel's
parameters (their ``do_not_specialize`` and ``constexpr`` marks), the binder
turns the launch's arguments into the specialisation list
(``native_specialize_impl``: ``("i32", "D")``, ``("constexpr", 1)``,
``("*fp16", "D")``...), and ``compute_cache_key`` turns that list and the
launch options into the key. The backend passed is ``BaseBackend``, whose
integer and pointer specialisation the CUDA backend inherits unchanged.

:func:`recording` swaps the module's kernels for proxies that record each
launch's key (and launch it, unless told not to); :func:`drive_shapes` sends a
grid of layouts, shapes and dtypes through the three wrappers.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from triton.backends.compiler import BaseBackend
from triton.runtime.jit import JITFunction, compute_cache_key, create_function_from_signature

from crossattn_sizing.core.slot_layout import SlotLayout
from crossattn_sizing.impl.step import AttentionStep, SlotStep, WriteStep

KERNELS = ("_slot_mapping_kernel", "_write_kv_kernel", "_paged_attention_kernel")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SLOT_MAPPING = "slot mapping (int only)"
"""The group of the slot-mapping kernel, which reads no float tensor."""


def compiled(kernel: Any) -> JITFunction:
    """``kernel`` as the compiled path builds it (an interpreted function keeps what @triton.jit was given).

    Built from the kernel's own function and decoration arguments each time, so a
    test that edits ``do_not_specialize`` sees its edit.
    """
    if isinstance(kernel, JITFunction):
        return kernel
    made = (kernel.fn, repr(sorted(kernel.kwargs.items())))
    if made not in _COMPILED:
        jit = JITFunction(kernel.fn, **kernel.kwargs)
        _COMPILED[made] = jit, create_function_from_signature(jit.signature, jit.params, BaseBackend)
    return _COMPILED[made][0]


_COMPILED: dict[tuple[Any, str], tuple[JITFunction, Any]] = {}
"""Per function and decoration arguments: the compiled-path function and its binder (built once)."""


def specialisation(jit: JITFunction, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[Any], str]:
    """The specialisation list and the cache key Triton would compute for this launch of ``jit``."""
    binder = next((b for j, b in _COMPILED.values() if j is jit), None)
    if binder is None:
        binder = create_function_from_signature(jit.signature, jit.params, BaseBackend)
    _, spec, options = binder(*args, **kwargs)
    return spec, compute_cache_key({}, spec, options)


@dataclass
class Keys:
    """Launches seen per kernel, and the distinct keys per dtype group (see :func:`group_of`)."""

    by_group: dict[str, set[tuple[str, str]]] = field(default_factory=lambda: collections.defaultdict(set))
    launches: collections.Counter[str] = field(default_factory=collections.Counter)
    specialised: dict[str, set[str]] = field(default_factory=lambda: collections.defaultdict(set))

    def record(self, name: str, kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        jit = compiled(kernel)
        spec, key = specialisation(jit, args, kwargs)
        self.launches[name] += 1
        self.by_group[group_of(name, args)].add((name, key))
        for param, entry in zip(jit.params, spec, strict=True):
            # An integer argument specialised on its value: ("constexpr", 1) though not declared
            # constexpr, or ("i32", "D") / ("i32", "") rather than ("i32", None).
            on_value = entry[0] in ("constexpr", "i32", "i64", "u64") and entry[1] is not None
            if on_value and not param.is_constexpr:
                self.specialised[name].add(param.name)

    def counts(self) -> dict[str, int]:
        """Distinct keys per dtype group."""
        return {group: len(keys) for group, keys in sorted(self.by_group.items())}


def group_of(name: str, args: tuple[Any, ...]) -> str:
    """The dtype a launch is counted under: its KV cache's (write, attention), or the slot-mapping group."""
    if name == "_slot_mapping_kernel":
        return SLOT_MAPPING
    cache = args[2] if name == "_write_kv_kernel" else args[1]
    return str(cache.dtype).removeprefix("torch.")


class _Proxy:
    """Stands in for a kernel: ``proxy[grid](*args, **kwargs)`` records the key, then launches (or not)."""

    def __init__(self, name: str, kernel: Any, keys: Keys, launch: bool) -> None:
        self.name, self.kernel, self.keys, self.launch = name, kernel, keys, launch

    def __getitem__(self, grid: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> None:
            self.keys.record(self.name, self.kernel, args, kwargs)
            if self.launch:
                self.kernel[grid](*args, **kwargs)

        return run


@contextlib.contextmanager
def recording(module: types.ModuleType, *, launch: bool = True) -> Iterator[Keys]:
    """Every launch of the module's kernels records its key in the :class:`Keys` yielded."""
    keys = Keys()
    saved = {name: getattr(module, name) for name in KERNELS}
    try:
        for name, kernel in saved.items():
            setattr(module, name, _Proxy(name, kernel, keys, launch))
        yield keys
    finally:
        for name, kernel in saved.items():
            setattr(module, name, kernel)


LAYOUTS = tuple(
    SlotLayout(kbs, dcp, interleave, rank)
    for kbs in (1, 2, 3, 16, 17, 32)
    for dcp in (1, 2, 4)
    for interleave in sorted({1, 2, kbs})
    if kbs % interleave == 0
    for rank in sorted({0, 1, dcp - 1})
    if rank < dcp
)
"""Kernel block sizes on both sides of 1 and 16, DCP sizes 1 to 4, interleaves 1, 2 and whole blocks,
first, second and last ranks: every value pattern Triton tells apart, in each argument."""


def drive_shapes(module: types.ModuleType) -> None:
    """Call the three wrappers over :data:`LAYOUTS`, row widths, token counts, head shapes, dtypes."""
    for layout, row_stride, tokens in itertools.product(LAYOUTS, (1, 7, 16, 33), (1, 5, 16, 33)):
        table = torch.zeros(4 * row_stride + 3, dtype=torch.int32)
        qsl = torch.tensor([0, tokens // 2, tokens], dtype=torch.int32)
        step = SlotStep(table, row_stride, torch.tensor([0, 1], dtype=torch.int32), qsl,
                        torch.arange(tokens, dtype=torch.int64), layout)  # fmt: skip
        for pad in (tokens, tokens + 16, 64):
            module.triton_slot_mapping(step, torch.empty(max(pad, tokens), dtype=torch.int64))
    shapes = itertools.product(DTYPES, (1, 2), (1, 2, 3, 4, 8, 16), (1, 5, 16, 33))
    for dtype, heads, head_dim, tokens in shapes:
        cache = torch.zeros(64, 16, heads, head_dim, dtype=dtype)
        key = torch.zeros(tokens, heads, head_dim, dtype=dtype)
        slots = WriteStep(torch.arange(tokens, dtype=torch.int64))
        module.triton_write_kv(key, key, cache, cache.clone(), slots)
        table, seq_lens = torch.zeros(9, dtype=torch.int32), torch.tensor([3, 17], dtype=torch.int32)
        for layout, causal in itertools.product(LAYOUTS[::3], (False, True)):
            qsl = torch.tensor([0, tokens // 2, tokens], dtype=torch.int32)
            step = AttentionStep(table, 4, qsl, seq_lens, torch.arange(tokens), layout, causal, 0.5)
            module.triton_paged_attention(key, cache, cache, step)
