"""SGLang's own functions on one decode batch, in the worker process (imports torch).

What runs as the release wrote it (each from its own file, see
:mod:`crossattn_sizing.engine.sglang.source`):

- the row width: ``get_req_to_token_extra_context_len`` (``mem_cache/allocation_sizing.py``)
  added to ``context_len``, and the table built by ``ReqToTokenPool.__init__``
  (``mem_cache/memory_pool.py``);
- ``ScheduleBatch.prepare_encoder_info_extend`` (``managers/schedule_batch.py``):
  the encoder part stripped from ``seq_lens`` and the cache locations;
- the decode location rule: ``alloc_for_decode_default`` (``mem_cache/allocation.py``),
  which writes the step's token at ``encoder_lens + seq_lens``;
- ``FlashAttentionBackend.init_forward_metadata`` (eager) and
  ``_apply_cuda_graph_metadata`` (CUDA-graph replay), on a stand-in ``self``
  holding only what a plain decode reads (``layers/attention/flashattention_backend.py``).

What is stood in for, and why, is :data:`STAND_INS_DOC` (docs/engine.md). The
table the backend gathers from is :class:`GuardedTable`: the first index past
a row raises :class:`~crossattn_sizing.core.read_gather.ReadOutOfRow` with the
pool row, the column and the width, before torch indexes anything.
"""

from __future__ import annotations

import contextlib
import sys
import types
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from crossattn_sizing.core.read_gather import ReadOutOfRow
from crossattn_sizing.engine.adapter import AdapterGap, StandInReached, engine_frame, not_run
from crossattn_sizing.engine.sglang.source import (
    Missing,
    SourceModule,
    execute,
    find_class,
    parse_release_file,
    require_methods,
    take,
)

STAND_INS_DOC: tuple[tuple[str, str], ...] = (
    (
        "sgl_kernel",
        "a module whose every function raises if called (CUDA-only kernels; none is called on "
        "the metadata path)",
    ),
    ("platform probes (is_cuda, is_hip, is_npu, is_xpu, _is_* flags)", "False: this is a CPU"),
    (
        "server settings (get_spec, get_schedule, get_parallel, max_speculative_num_draft_tokens, "
        "get_alloc_page_size)",
        "no speculative decoding, page size 1, no DCP",
    ),
    ("TorchMemorySaverAdapter", "a region that does nothing (no memory saver)"),
    ("is_pin_memory_available / flatten_arrays_to_pinned_cpu", "no pinned memory; a flat int64 CPU tensor"),
    ("the tree cache and its token allocator", "the next free slots in order, nothing to evict"),
    ("AttentionBackend (base class)", "an empty class: only FlashAttentionBackend's own methods run"),
    ("ForwardMode", "the release's own enum, executed alone from model_executor/forward_batch_info.py"),
)
"""Every stand-in and what it replaces, for the ready line and docs/engine.md."""


class KernelCalled(StandInReached):
    """A stubbed ``sgl_kernel`` function was called: the harness cannot run it on CPU."""


def sgl_kernel_stub() -> types.ModuleType:
    """``sgl_kernel`` for a CPU: importable, and every attribute a function that raises if called."""
    module = types.ModuleType("sgl_kernel")

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):  # module protocol (``__file__``, ``__path__``): what tools probe for
            raise AttributeError(name)

        def refuse(*_: Any, **__: Any) -> Any:
            raise KernelCalled(f"sgl_kernel.{name}", "called (a CUDA kernel, stubbed on CPU)")

        return refuse

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return module


class GuardedTable:
    """``req_to_token`` behind a guard: reads and writes past a row are refused before torch indexes.

    A ``(rows, columns)`` index with tensor columns (the FA3 gather) is
    checked element by element for the first column outside ``[0, width)``;
    a slice is clipped by torch and needs no check. Everything else is the
    tensor's own behaviour.
    """

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
        self.width = int(tensor.shape[1])
        self.reads = 0

    def _check(self, key: Any, attention: str) -> None:
        if not isinstance(key, tuple) or len(key) != 2 or not isinstance(key[1], torch.Tensor):
            return
        rows, cols = key
        rows_t = rows if isinstance(rows, torch.Tensor) else torch.tensor(rows)
        rows_b, cols_b = torch.broadcast_tensors(rows_t, cols)
        bad = (cols_b < 0) | (cols_b >= self.width)
        if bool(bad.any()):
            first = int(bad.flatten().nonzero()[0])
            raise ReadOutOfRow(
                int(rows_b.flatten()[first]), int(cols_b.flatten()[first]), self.width, attention
            )

    def __getitem__(self, key: Any) -> torch.Tensor:
        self._check(key, "self")
        self.reads += 1
        return self.tensor[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._check(key, "write")
        self.tensor[key] = value

    @property
    def shape(self) -> torch.Size:
        return self.tensor.shape

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tensor, name)


class _NoMemorySaver:
    @staticmethod
    def create(**_: Any) -> Any:
        return types.SimpleNamespace(region=lambda *_a, **_k: contextlib.nullcontext())


class _Allocator:
    """The token allocator: slots handed out in order (page size 1)."""

    page_size = 1

    def __init__(self) -> None:
        self.next = 1

    def alloc(self, n: int) -> torch.Tensor:
        out = torch.arange(self.next, self.next + n, dtype=torch.int64)
        self.next += n
        return out


class _StandInBase:
    """``AttentionBackend`` stood in: FlashAttentionBackend's own methods are all that run."""


def _unguarded(kernel: Any) -> Any:
    """The release's Triton launcher, given the table's tensor: a kernel takes pointers, not a guard.

    The kernel bounds its loads by each request's ``seq_lens``; the guard
    stays on every index the Python code makes.
    """

    def launch(*args: Any, **kwargs: Any) -> Any:
        args = tuple(a.tensor if isinstance(a, GuardedTable) else a for a in args)
        return kernel(*args, **kwargs)

    return launch


def _flatten(arrays: Sequence[array], _pin: bool) -> torch.Tensor:
    return torch.tensor([x for a in arrays for x in a], dtype=torch.int64)


FA_DEFINITIONS = (
    "_should_disable_scheduler_metadata_precompute",
    "FlashAttentionMetadata",
    "FlashAttentionBackend",
)
"""What runs of ``flashattention_backend.py``: not the multi-step backend, nor the two helpers
``torch.compile``/``torch._dynamo`` decorate (compiling them needs dynamo, and a plain decode calls
neither)."""

PLATFORM = {name: False for name in ("_is_hip", "_is_npu", "_is_cuda", "_is_xpu", "_is_cpu")}


def _settings() -> dict[str, Any]:
    spec = types.SimpleNamespace(speculative_algorithm=None, speculative_num_draft_tokens=None)
    return {
        "get_spec": lambda: spec,
        "get_schedule": lambda: types.SimpleNamespace(page_size=1),
        "get_parallel": lambda: types.SimpleNamespace(dcp_enabled=False, attn_dcp_size=1),
        "max_speculative_num_draft_tokens": lambda: None,
        "get_alloc_page_size": lambda: 1,
        "is_cuda": lambda: False,
        "is_hip": lambda: False,
        "is_npu": lambda: False,
        "is_xpu": lambda: False,
        "is_cpu": lambda: True,
        "get_compiler_backend": lambda: "eager",
        "TorchMemorySaverAdapter": _NoMemorySaver,
        "GPU_MEMORY_TYPE_KV_CACHE": "kv_cache",
        "is_pin_memory_available": lambda *_: False,
        "flatten_arrays_to_pinned_cpu": _flatten,
        "evict_from_tree_cache": lambda *_: None,
        "AttentionBackend": _StandInBase,
    }


def _method(module: SourceModule, cls: str, name: str, ns: dict[str, Any]) -> Any:
    """The release's ``cls.name`` compiled alone as a function over ``ns`` (real file and lines)."""
    import ast

    for node in find_class(module, cls).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            node = ast.FunctionDef(**{**node.__dict__, "decorator_list": []})
            code = compile(ast.Module(body=[node], type_ignores=[]), str(module.path), "exec")
            exec(code, ns)  # the release's own method body
            return ns.pop(name)
    raise AdapterGap(f"{cls}.{name}", f"{cls} lacks {name} (the harness calls it)", module.rel)


@dataclass
class SglangRelease:
    """One SGLang tree's functions, executed from its files."""

    root: Path
    forward_mode: Any
    pool_class: Any
    extra_context_len: Any
    prepare_encoder_info_extend: Any
    alloc_for_decode: Any
    backend_class: Any
    metadata_class: Any

    @classmethod
    def load(cls, root: Path) -> SglangRelease:
        """Parse the release's attention backend from ``root`` and stand in for what it cannot import."""
        sys.modules.setdefault("sgl_kernel", sgl_kernel_stub())
        stand = _settings()
        stub = sys.modules["sgl_kernel"]
        fa = parse_release_file(root, "flashattention")
        require_methods(fa, "FlashAttentionBackend", ("init_forward_metadata", "_apply_cuda_graph_metadata"))
        for name, (source, attr) in fa.imports.items():
            if source.split(".")[0] == "sgl_kernel":
                stand[name] = getattr(stub, attr or name)
        kernel = parse_release_file(root, "decode_metadata_kernel")
        kernel_ns = execute(
            kernel,
            stand,
            only=(
                "_resolve_metadata_page_ids",
                "_fused_decode_metadata_kernel",
                "normal_decode_set_metadata",
            ),
        )
        launcher = take(kernel_ns, "normal_decode_set_metadata", kernel)
        stand["normal_decode_set_metadata"] = _unguarded(launcher)
        fbi = parse_release_file(root, "forward_batch_info")
        stand["ForwardMode"] = take(execute(fbi, stand, only=("ForwardMode",)), "ForwardMode", fbi)
        fa_ns = execute(fa, stand, only=FA_DEFINITIONS)
        pool = parse_release_file(root, "memory_pool")
        pool_ns = execute(pool, stand, only=("ReqToTokenPool",))
        sizing = parse_release_file(root, "allocation_sizing")
        sizing_ns = execute(sizing, stand, only=("get_req_to_token_extra_context_len",))
        sb = parse_release_file(root, "schedule_batch")
        sb_ns = {name: _bind_import(sb, name, stand) for name in sb.imports}
        sb_ns["torch"] = torch
        prepare = _method(sb, "ScheduleBatch", "prepare_encoder_info_extend", sb_ns)
        alloc = parse_release_file(root, "allocation")
        alloc_ns = execute(
            alloc,
            stand,
            only=("alloc_for_decode_default", "_alloc_page_size", "alloc_token_slots"),
            extra=PLATFORM,
        )
        return cls(
            root,
            stand["ForwardMode"],
            take(pool_ns, "ReqToTokenPool", pool),
            take(sizing_ns, "get_req_to_token_extra_context_len", sizing),
            prepare,
            take(alloc_ns, "alloc_for_decode_default", alloc),
            take(fa_ns, "FlashAttentionBackend", fa),
            take(fa_ns, "FlashAttentionMetadata", fa),
        )


def _bind_import(module: SourceModule, name: str, stand: dict[str, Any]) -> Any:
    from crossattn_sizing.engine.sglang.source import bind

    source, attr = module.imports[name]
    return bind(name, source, attr, stand)


@dataclass
class Prepared:
    """A decode batch laid into the release's pool: what the backend's metadata is built from."""

    pool: Any
    table: GuardedTable
    encoder_lens: torch.Tensor
    seq_lens: torch.Tensor
    req_pool_indices: torch.Tensor
    ids: list[torch.Tensor]  # per request: the ids its columns [0, E + d) hold


def prepare_batch(rel: SglangRelease, context_len: int, batch: Sequence[tuple[int, int, int]]) -> Prepared:
    """Lay out ``batch`` = ``[(E, prompt, d)]`` with the release's pool, extend stripping and decode rule.

    Extend writes ``[0, E + prompt)`` (the release's ``prepare_encoder_info_extend``
    strips ``E`` from ``seq_lens``); the decode steps before the last write
    their columns directly, and the last runs the release's
    ``alloc_for_decode_default``, which writes at ``encoder_lens + seq_lens``.
    """
    width = context_len + rel.extra_context_len()
    pool = rel.pool_class(size=len(batch), max_context_len=width, device="cpu", enable_memory_saver=False)
    table = GuardedTable(pool.req_to_token)
    pool.req_to_token = table
    allocator = _Allocator()
    rows = torch.tensor(pool.free_slots[: len(batch)], dtype=torch.int64)
    reqs = []
    for (e, p, _d), row in zip(batch, rows.tolist(), strict=True):
        mm = types.SimpleNamespace(num_image_tokens=e) if e else None
        reqs.append(
            types.SimpleNamespace(
                multimodal_inputs=mm,
                prefix_len=0,
                extend_len=e + p,
                logprob_start_len=0,
                req_pool_idx=row,
                kv=types.SimpleNamespace(kv_allocated_len=0, kv_committed_len=0),
            )
        )
    out_cache_loc = allocator.alloc(sum(e + p for e, p, _ in batch))
    sched = types.SimpleNamespace(
        device="cpu",
        reqs=reqs,
        forward_mode=rel.forward_mode.EXTEND,
        out_cache_loc=out_cache_loc,
        extend_lens=[e + p for e, p, _ in batch],
        prefix_lens=[0] * len(batch),
        extend_num_tokens=int(out_cache_loc.numel()),
        extend_input_logprob_token_ids=None,
    )
    full_locs = out_cache_loc.clone()
    rel.prepare_encoder_info_extend(
        sched, [array("l", range(e + p)) for e, p, _ in batch], [e + p for e, p, _ in batch]
    )
    ids, pt = [], 0
    for i, (e, p, d) in enumerate(batch):
        own = torch.empty(e + d, dtype=torch.int64)
        own[: e + p] = full_locs[pt : pt + e + p]
        pt += e + p
        if d - 1 > p:  # the decode steps before the last: one token each at E + seq_len
            own[e + p : e + d - 1] = allocator.alloc(d - 1 - p)
        table.tensor[rows[i], : e + d - 1] = own[: e + d - 1].to(torch.int32)
        ids.append(own)
    seq_lens = torch.tensor([d - 1 for _, _, d in batch], dtype=torch.int64)
    decode = types.SimpleNamespace(
        seq_lens=seq_lens,
        seq_lens_cpu=seq_lens.clone(),
        encoder_lens=sched.encoder_lens,
        req_pool_indices=rows,
        req_pool_indices_cpu=rows.clone(),
        req_to_token_pool=pool,
        reqs=reqs,
        model_config=types.SimpleNamespace(is_encoder_decoder=True),
        device="cpu",
        tree_cache=types.SimpleNamespace(page_size=1, token_to_kv_pool_allocator=allocator),
        maybe_evict_swa=lambda: None,
    )
    pool.alloc_aux_to_lengths = lambda **_: None
    last = rel.alloc_for_decode(decode, 1)
    for i, (e, _p, d) in enumerate(batch):
        ids[i][e + d - 1] = last[i]
    return Prepared(pool, table, sched.encoder_lens, seq_lens + 1, rows, ids)


def _backend(rel: SglangRelease, prepared: Prepared, context_len: int) -> Any:
    """The stand-in ``self``: the release's class, none of its ``__init__``, the attributes a decode reads."""
    backend = object.__new__(rel.backend_class)
    backend.__dict__.update(
        req_to_token_pool=prepared.pool,
        req_to_token=prepared.table,
        max_context_len=context_len,
        topk=0,
        speculative_num_steps=0,
        speculative_step_id=0,
        page_size=1,
        is_prefill_aware_swa=False,
        has_swa=False,
        use_sliding_window_kv_pool=False,
        local_attn_builder=None,
        _sched_meta_buf=None,
        kv_index_translator=types.SimpleNamespace(is_translating=False, reads_are_translated=False),
        _pa_swa_max_prefill_len=0,
        _get_scheduler_metadata=None,
        use_mla=False,
        max_num_pages=prepared.table.width,
    )
    return backend


def run_metadata(
    rel: SglangRelease, context_len: int, batch: Sequence[tuple[int, int, int]], path: str
) -> dict[str, Any]:
    """Build the decode metadata for ``batch`` on ``path`` (``eager`` or ``replay``) and judge what it reads.

    Returns ``{"verdict": "holds"}``; ``{"verdict": "fails", "row", "column",
    "width", "message"}`` for the first read past a row (or a consumed column
    that is not the request's own); ``{"verdict": "not run", "reason"}`` when
    anything else is raised (the harness's gap, :func:`~crossattn_sizing.engine.adapter.not_run`).
    """
    step = "laying the batch into the release's pool (ReqToTokenPool, prepare_encoder_info_extend, "
    step += "alloc_for_decode_default)"
    try:
        prepared = prepare_batch(rel, context_len, batch)
        backend = _backend(rel, prepared, context_len)
        forward = types.SimpleNamespace(
            seq_lens=prepared.seq_lens,
            seq_lens_cpu=prepared.seq_lens.clone(),
            batch_size=len(batch),
            forward_mode=rel.forward_mode.DECODE,
            spec_info=None,
            encoder_lens=prepared.encoder_lens,
            req_pool_indices=prepared.req_pool_indices,
            kv_loc_plan=None,
            out_cache_loc=None,
        )
        if path == "eager":
            step = "FlashAttentionBackend.init_forward_metadata"
            backend.init_forward_metadata(forward)
        else:
            step = "FlashAttentionBackend._apply_cuda_graph_metadata"
            _replay(rel, backend, forward, prepared)
        step = "reading the decode metadata the backend built (FlashAttentionMetadata)"
        return _judge(backend.forward_metadata, prepared, batch)
    except ReadOutOfRow as err:  # the guard's judged observation: a read past the row
        return {
            "verdict": "fails",
            "row": err.row,
            "column": err.column,
            "width": err.width,
            "message": str(err),
            "where": engine_frame(err, rel.root)[0],  # the release's line that indexed
        }
    except Exception as exc:  # anything else is the adapter's gap: not run, naming the piece and line
        return not_run(exc, step, rel.root)


def _judge(meta: Any, prepared: Prepared, batch: Sequence[tuple[int, int, int]]) -> dict[str, Any]:
    """The consumed part of each page table row must be the request's own ids."""
    for i, (e, _p, d) in enumerate(batch):
        own = prepared.ids[i]
        checks = (
            ("self", meta.page_table[i, :d], own[e : e + d]),
            ("cross", meta.encoder_page_table[i, :e], own[:e]),
        )
        for attention, got, want in checks:
            if not torch.equal(got.to(torch.int64), want):
                return {
                    "verdict": "fails",
                    "row": int(prepared.req_pool_indices[i]),
                    "column": -1,
                    "width": prepared.table.width,
                    "message": f"{attention}-attention page table of request {i} is not its own ids",
                }
    return {"verdict": "holds"}


def _replay(rel: SglangRelease, backend: Any, forward: Any, prepared: Prepared) -> None:
    """CUDA-graph replay: the release's ``_apply_cuda_graph_metadata``, into buffers as capture sizes them."""
    bs, width = forward.batch_size, prepared.table.width
    meta = rel.metadata_class()
    meta.cache_seqlens_int32 = torch.zeros(bs, dtype=torch.int32)
    meta.cu_seqlens_q = torch.arange(bs + 1, dtype=torch.int32)
    meta.cu_seqlens_k = torch.zeros(bs + 1, dtype=torch.int32)
    meta.page_table = torch.zeros(bs, width, dtype=torch.int32)
    meta.encoder_lens_int32 = torch.zeros(bs, dtype=torch.int32)
    meta.encoder_cu_seqlens_k = torch.zeros(bs + 1, dtype=torch.int32)
    meta.encoder_page_table = torch.zeros(bs, width, dtype=torch.int32)
    backend.decode_cuda_graph_metadata = {bs: meta, "strided_indices": torch.arange(width)}
    backend._apply_cuda_graph_metadata(
        None,
        bs,
        forward.req_pool_indices,
        forward.seq_lens,
        forward.encoder_lens,
        forward.forward_mode,
        None,
        forward.seq_lens_cpu,
        None,
    )


__all__ = ["STAND_INS_DOC", "Missing", "SglangRelease", "run_metadata"]
