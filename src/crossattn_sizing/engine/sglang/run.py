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
  holding only what a plain decode reads (``layers/attention/flashattention_backend.py``);
- ``FlashAttentionBackend.forward_decode`` on that metadata, for a self- and a
  cross-attention layer, its kernel call recorded
  (:mod:`crossattn_sizing.engine.sglang.kernel_calls`): what the kernel reads
  is what the judge checks.

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
from typing import Any, NamedTuple

import torch

from crossattn_sizing.core.batch_requests import Request, cached_prefix, extended
from crossattn_sizing.core.read_gather import ReadOutOfRow
from crossattn_sizing.engine.adapter import AdapterGap, StandInReached, engine_frame, not_run
from crossattn_sizing.engine.sglang import kernel_calls
from crossattn_sizing.engine.sglang.releases import COMMON_STAND_INS, SglangRange, range_for
from crossattn_sizing.engine.sglang.source import (
    Missing,
    SourceModule,
    definitions,
    execute,
    find_class,
    parse_release_file,
    require_methods,
    take,
)

STAND_INS_DOC: tuple[tuple[str, str], ...] = COMMON_STAND_INS
"""Every stand-in and what it replaces, for the ready line and docs/engine.md."""

RECORDER = kernel_calls.KernelRecorder()
"""The attention kernel as the backend module binds it: each run clears it, then judges what it recorded."""

READ_PAST_ROW = "a gathered column is outside the request's row"
EXTEND_WRONG = ("the release's extend (prepare_encoder_info_extend) does not hand on the request's own "
                "lengths and slots")
KERNEL_ARGS_WRONG = "the attention call hands the kernel an index or length that is not the request's"
WRITE_PAST_ROW = "an admitted request writes past its row (the tree's own rows)"
"""Each verdict's headline (``headline``): the step that failed, for the property's first line."""


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
        self.keys: set[str] = set()  # "gather" (tensor columns) or "slice": how reads indexed the rows

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
        if isinstance(key, tuple) and len(key) == 2:
            self.keys.add("gather" if isinstance(key[1], torch.Tensor) else "slice")
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
    """One SGLang tree's functions, executed from its files, as its release range's table places them."""

    root: Path
    range: SglangRange
    chosen: str  # how the range was chosen (the ready line says it)
    forward_mode: Any
    pool_class: Any
    extra_context_len: Any
    prepare_encoder_info_extend: Any
    alloc_for_decode: Any
    backend_class: Any
    metadata_class: Any

    def row_extra(self) -> int:
        """The columns a row has beyond ``context_len``: the release's own sizing, where it has one."""
        if self.extra_context_len is None:
            return 4  # the table's stand-in: the release computes ``extra_max_context_len = 4`` inline
        if self.range.sizing_takes_server_args:
            return int(self.extra_context_len(SERVER_ARGS))
        return int(self.extra_context_len())

    @classmethod
    def load(cls, root: Path) -> SglangRelease:
        """Parse the release's steps from ``root`` (where its range's table says); stand in for the rest."""
        rng, chosen = range_for(root)
        steps = rng.steps
        sys.modules.setdefault("sgl_kernel", sgl_kernel_stub())
        stand = _settings()
        kernel = sys.modules["sgl_kernel"]
        fa = parse_release_file(root, steps["metadata"].file)
        replay = steps["replay"].name.partition(".")[2]
        require_methods(fa, "FlashAttentionBackend", ("init_forward_metadata", replay))
        for name, (source, attr) in fa.imports.items():
            if source.split(".")[0] == "sgl_kernel":
                stand[name] = getattr(kernel, attr or name)
        stand.update({kernel_calls.KERNEL: RECORDER, "paged_kv_view": kernel_calls.paged_kv_view,
                      "paged_view": kernel_calls.paged_view, "AttentionType": kernel_calls.AttentionType})
        if rng.kernel.file != steps["metadata"].file:
            kernel_file = parse_release_file(root, rng.kernel.file)
            kernel_ns = execute(kernel_file, stand, only=functions(kernel_file), extra=PLATFORM)
            stand[rng.kernel.name] = _unguarded(take(kernel_ns, rng.kernel.name, kernel_file))
        for helper in rng.helpers:  # the release's own, where the tree has it
            if (root / helper.file).is_file():
                helper_file = parse_release_file(root, helper.file)
                helper_ns = execute(helper_file, stand, only=(helper.name,), extra=PLATFORM)
                if not isinstance(helper_ns.get(helper.name, Missing("")), Missing):
                    stand[helper.name] = helper_ns[helper.name]
        fbi = parse_release_file(root, steps["forward_mode"].file)
        stand["ForwardMode"] = take(execute(fbi, stand, only=("ForwardMode",)), "ForwardMode", fbi)
        fa_ns = execute(fa, stand, only=("FlashAttentionMetadata", "FlashAttentionBackend", *functions(fa)),
                        extra=PLATFORM)
        if rng.kernel.file == steps["metadata"].file:  # beside the backend (0.5.12 and older)
            fa_ns[rng.kernel.name] = _unguarded(take(fa_ns, rng.kernel.name, fa))
        pool = parse_release_file(root, steps["pool"].file)
        pool_ns = execute(pool, stand, only=(steps["pool"].name,))
        extra = None
        if "row_width" in steps:
            sizing = parse_release_file(root, steps["row_width"].file)
            sizing_ns = execute(sizing, stand, only=functions(sizing), extra=PLATFORM)
            extra = take(sizing_ns, steps["row_width"].name, sizing)
        sb = parse_release_file(root, steps["extend_strip"].file)
        sb_ns = {name: _bind_import(sb, name, stand) for name in sb.imports}
        sb_ns["torch"] = torch
        cls_name, _, method = steps["extend_strip"].name.partition(".")
        prepare = _method(sb, cls_name, method, sb_ns)
        alloc = parse_release_file(root, steps["decode_rule"].file)
        alloc_ns = execute(alloc, stand, only=functions(alloc), extra=PLATFORM)
        return cls(
            root,
            rng,
            chosen,
            stand["ForwardMode"],
            take(pool_ns, steps["pool"].name, pool),
            extra,
            prepare,
            take(alloc_ns, steps["decode_rule"].name, alloc),
            take(fa_ns, "FlashAttentionBackend", fa),
            take(fa_ns, "FlashAttentionMetadata", fa),
        )


SERVER_ARGS = types.SimpleNamespace(
    max_speculative_num_draft_tokens=None, speculative_algorithm=None, page_size=1,
    speculative_eagle_topk=None,
)
"""``server_args`` stood in where a release's row sizing takes it: no speculative decoding, page size 1."""


def functions(module: SourceModule) -> tuple[str, ...]:
    """The module's top-level functions the harness defines (its classes only where named)."""
    import ast

    return tuple(n for n in definitions(module) if any(
        isinstance(node, ast.FunctionDef) and node.name == n for node in module.body.body))


def _bind_import(module: SourceModule, name: str, stand: dict[str, Any]) -> Any:
    from crossattn_sizing.engine.sglang.source import bind

    source, attr = module.imports[name]
    return bind(name, source, attr, stand)


class ExtendRange(NamedTuple):
    """A request's extend span as 0.5.16 .. 0.5.21 spell it (``req.extend_range``, the utils' ``Range``)."""

    start: int
    end: int

    @property
    def length(self) -> int:
        """Tokens in the span."""
        return self.end - self.start


@dataclass
class Prepared:
    """A decode batch laid into the release's pool: what the backend's metadata is built from.

    ``encoder_lens``, ``seq_lens`` and ``req_pool_indices`` are what the
    release's own extend and decode hand the backend; ``ids`` is the truth,
    from the draw: per request, the slot of each of its ``E + d`` tokens, in order.
    """

    pool: Any
    table: GuardedTable
    encoder_lens: torch.Tensor
    seq_lens: torch.Tensor
    req_pool_indices: torch.Tensor
    ids: list[torch.Tensor]
    extend: Any = None
    """The batch after the release's ``prepare_encoder_info_extend`` (its ``seq_lens``, ``extend_lens``,
    ``prefix_lens``, ``encoder_lens``, ``out_cache_loc``, ``encoder_out_cache_loc``): what its extend runs
    on."""


class ExtendMismatch(RuntimeError):
    """The release's extend output disagrees with the draw (a judged observation: the read side fails)."""

    def __init__(self, request: int, what: str) -> None:
        super().__init__(f"extend: request {request}: {what}")
        self.request = request


def prepare_batch(rel: SglangRelease, context_len: int, batch: Sequence[Request]) -> Prepared:
    """Lay out ``batch`` = ``[(E, prompt, d[, cached])]`` with the release's pool, extend stripping and
    decode rule.

    A cached prefix's slots are handed out first (an earlier request computed
    them; the radix cache hands this one its ``prefix_indices``); the extend's
    slots follow. Both are written at ``[0, E + prompt)`` of each row (the
    stand-in for ``alloc_for_extend``), then the release's
    ``prepare_encoder_info_extend`` strips the encoder part: its output (the
    decoder lengths, the prefix and extend lengths, the split of
    ``out_cache_loc``) is what the decode runs on, never a length the harness
    computed. Each decode step
    before the last writes its slot where the release's decode rule puts it
    (``encoder_lens + seq_lens``, ``seq_lens`` advancing one a step from the
    extend's); the last step runs the release's own decode rule, and
    ``seq_lens + 1`` (``prepare_for_decode``) is what the backend is handed.
    Every write goes through the row guard: a write past a row raises
    :class:`ReadOutOfRow` (``attention="write"``).
    """
    width = context_len + rel.row_extra()
    if width < 1:  # the tree's sizing leaves no row at all: the first token's write is already past it
        raise ReadOutOfRow(0, 0, width, "write")
    pool = rel.pool_class(size=len(batch), max_context_len=width, device="cpu", enable_memory_saver=False)
    table = GuardedTable(pool.req_to_token)  # the width is the pool's own row, whatever it was asked for
    pool.req_to_token = table
    allocator = _Allocator()
    rows = torch.tensor(list(pool.free_slots)[: len(batch)], dtype=torch.int64)
    cached = [cached_prefix(r) for r in batch]
    prefixes = [allocator.alloc(c) for c in cached]  # the earlier requests' slots, now the radix cache's
    reqs = []
    for (e, p, *_), c, prefix, row in zip(batch, cached, prefixes, rows.tolist(), strict=True):
        mm = types.SimpleNamespace(num_image_tokens=e) if e else None
        reqs.append(
            types.SimpleNamespace(  # the request as both spellings of the releases name its fields
                multimodal_inputs=mm, prefix_len=c, prefix_indices=prefix, extend_len=e + p - c,
                extend_range=ExtendRange(c, e + p),
                extend_input_len=e + p - c, logprob_start_len=0, extend_logprob_start_len=0,
                req_pool_idx=row, kv=types.SimpleNamespace(kv_allocated_len=0, kv_committed_len=0),
            )
        )
    extend_lens = [int(r[0]) + int(r[1]) - c for r, c in zip(batch, cached, strict=True)]
    out_cache_loc = allocator.alloc(sum(extend_lens))
    ids, pt = [], 0
    for i, ((e, p, d, *_), c) in enumerate(zip(batch, cached, strict=True)):  # the truth: each token's slot
        own = torch.full((e + d,), -1, dtype=torch.int64)
        own[:c] = prefixes[i]
        own[c : e + p] = out_cache_loc[pt : pt + e + p - c]
        table[rows[i].expand(e + p), torch.arange(e + p)] = own[: e + p].to(torch.int32)  # the extend's write
        pt += e + p - c
        ids.append(own)
    sched = types.SimpleNamespace(
        device="cpu", reqs=reqs, forward_mode=rel.forward_mode.EXTEND, out_cache_loc=out_cache_loc.clone(),
        extend_lens=list(extend_lens),
        prefix_lens=list(cached), extend_num_tokens=int(out_cache_loc.numel()),
        extend_input_logprob_token_ids=None, extend_logprob_start_lens=[0] * len(batch),
        model_config=types.SimpleNamespace(is_encoder_decoder=True),
    )
    input_ids: list[Any] = [array("q", range(c, int(r[0]) + int(r[1]))) for r, c in zip(batch, cached,
                                                                                      strict=True)]
    if rel.range.input_ids_are_lists:
        input_ids = [list(ids) for ids in input_ids]
    rel.prepare_encoder_info_extend(sched, input_ids, [int(r[0]) + int(r[1]) for r in batch])
    _check_extend(sched, batch, ids)
    seq_lens = sched.seq_lens.clone().to(torch.int64)  # the release's decoder lengths after the extend
    encoder_lens = sched.encoder_lens
    for i, (e, p, d, *_) in enumerate(batch):  # earlier decode steps: one slot each, where the rule puts it
        steps = d - 1 - p
        if steps > 0:
            slots = allocator.alloc(steps)
            start = int(encoder_lens[i]) + int(seq_lens[i])
            table[rows[i].expand(steps), torch.arange(start, start + steps)] = slots.to(torch.int32)
            ids[i][e + p : e + d - 1] = slots
    seq_lens = seq_lens + torch.tensor([int(r[2]) - 1 - int(r[1]) for r in batch], dtype=torch.int64)
    decode = types.SimpleNamespace(
        seq_lens=seq_lens, seq_lens_cpu=seq_lens.clone(), encoder_lens=encoder_lens,
        req_pool_indices=rows, req_pool_indices_cpu=rows.clone(), req_to_token_pool=pool, reqs=reqs,
        model_config=types.SimpleNamespace(is_encoder_decoder=True), device="cpu",
        tree_cache=types.SimpleNamespace(page_size=1, token_to_kv_pool_allocator=allocator,
                                         is_chunk_cache=lambda: True),
        maybe_evict_swa=lambda: None,
    )
    pool.alloc_aux_to_lengths = lambda **_: None
    last = rel.alloc_for_decode(decode, 1)
    for i, (e, _p, d, *_) in enumerate(batch):
        ids[i][e + d - 1] = last[i]
    return Prepared(pool, table, encoder_lens, seq_lens + 1, rows, ids, sched)


def _check_extend(sched: Any, batch: Sequence[Request], ids: list[torch.Tensor]) -> None:
    """The release's extend output against the draw: the encoder lengths, the decoder lengths (its
    prompts), the prefix and extend lengths its attention is handed, and the split of ``out_cache_loc``
    into each request's extended prompt slots and (where its encoder is not cached) its encoder slots."""
    dec, enc, pd, pe = sched.out_cache_loc, getattr(sched, "encoder_out_cache_loc", None), 0, 0
    for i, request in enumerate(batch):
        e, p = int(request[0]), int(request[1])
        enc_new, dec_new = extended(request)
        if int(sched.encoder_lens[i]) != e:
            raise ExtendMismatch(i, f"encoder_lens {int(sched.encoder_lens[i])}, the request has {e}")
        if int(sched.seq_lens[i]) != p:
            raise ExtendMismatch(i, f"decoder length (seq_lens) {int(sched.seq_lens[i])} after stripping the "
                                    f"encoder, the request has {p} prompt tokens")
        for name, want, what in (("prefix_lens", p - dec_new, "of its prompt tokens cached"),
                                 ("extend_lens", dec_new, "prompt tokens to extend")):
            got = getattr(sched, name, None)
            if got is not None and int(got[i]) != want:
                raise ExtendMismatch(i, f"{name} {int(got[i])} after stripping the encoder, the request has "
                                        f"{want} {what} (cached prefix {cached_prefix(request)}, E {e})")
        if not torch.equal(dec[pd : pd + dec_new].to(torch.int64), ids[i][e + p - dec_new : e + p]):
            raise ExtendMismatch(i, "the decoder part of out_cache_loc is not its own prompt slots")
        if enc is not None and not torch.equal(enc[pe : pe + enc_new].to(torch.int64), ids[i][:enc_new]):
            raise ExtendMismatch(i, "encoder_out_cache_loc is not its own encoder slots")
        pd, pe = pd + dec_new, pe + enc_new


def _backend(rel: SglangRelease, prepared: Prepared, context_len: int) -> Any:
    """The stand-in ``self``: the release's class, none of its ``__init__``, the attributes a decode reads."""
    return backend_self(rel, prepared.pool, prepared.table, context_len,
                        1 + max(int(ids.max()) for ids in prepared.ids))


def backend_self(rel: SglangRelease, pool: Any, table: GuardedTable, context_len: int, slots: int) -> Any:
    """``FlashAttentionBackend``'s ``self`` over ``pool`` (its rows behind ``table``) and a KV pool of
    ``slots`` slots: the release's class, none of its ``__init__``, the attributes a decode reads
    (:data:`~crossattn_sizing.engine.sglang.releases.COMMON_STAND_INS`)."""
    backend = object.__new__(rel.backend_class)
    backend.__dict__.update(
        req_to_token_pool=pool,
        req_to_token=table,
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
        kv_index_translator=types.SimpleNamespace(
            is_translating=False,
            reads_are_translated=False,
            build_index_table=lambda *, req_pool_indices, **_: types.SimpleNamespace(
                ids=table, row_ids=req_pool_indices, row_stride=table.width,
                entry_page_size=1, is_translated=False, sliding_window_ids=None,
            ),
        ),
        kv_read_tables=None,
        _unified_hooks=types.SimpleNamespace(
            enabled=False, v2p_page_table=None, translate_kv_loc_dense=None, kernel_page_multiplier=1
        ),
        _pa_swa_max_prefill_len=0,
        _get_scheduler_metadata=None,
        use_mla=False,
        max_num_pages=table.width,
        has_local_attention=False,
        _unified_dense=False,
        attention_chunk_size=None,
        forward_metadata=None,
        token_to_kv_pool=kernel_calls.DecodeKVPool(slots),
        kv_cache_dtype=torch.float32,
        kv_cache_dtype_str="auto",
        kv_cache_is_mxfp8=False,
        fa_impl_ver=3,
        num_splits=0,
        decode_num_splits=0,
        _decode_uses_static_max_seqlen_k=False,
        flash_attn_with_kvcache=RECORDER,
    )
    return backend


def _not_run(rel: SglangRelease, exc: BaseException, step: str) -> dict[str, Any]:
    """:func:`~crossattn_sizing.engine.adapter.not_run` for ``step`` of this release, its reason led by the
    release range; the release's own ``assert`` (0.5.12 and older assert one request per batch on the eager
    path) is said as such (``asserts``): the engine refuses the batch, the harness did not break."""
    verdict = not_run(exc, step, rel.root)
    if isinstance(exc, AssertionError) and verdict["where"]:
        verdict["asserts"] = True
        verdict["reason"] = (f"the release asserts: {exc} at {verdict['where']} (step: {step}); the engine "
                             "refuses this batch, not a verdict on it")
    verdict["reason"] = f"{rel.range.label()}: {verdict['reason']}"
    return verdict


def run_write(rel: SglangRelease, context_len: int, batch: Sequence[Request]) -> dict[str, Any]:
    """The write side on the release's own rows: lay ``batch`` out (extend, earlier decodes, the release's
    decode rule) in its ``ReqToTokenPool``; ``fails`` at the first write past a row."""
    try:
        prepared = prepare_batch(rel, context_len, batch)
    except ReadOutOfRow as err:
        if err.attention != "write":
            raise
        return {"verdict": "fails", "row": err.row, "column": err.column, "width": err.width,
                "headline": WRITE_PAST_ROW,
                "message": f"a token of row {err.row} is written at column {err.column}, past the release's "
                           f"row (width {err.width}: context_len {context_len} + {rel.row_extra()} from "
                           "its own sizing)"}
    except ExtendMismatch as err:  # the release's own extend output is not the draw's: its step fails
        return extend_failure(err)
    except Exception as exc:  # the adapter's own limits: not a verdict on the release
        return _not_run(rel, exc, "laying the batch into the release's pool (the write side)")
    return {"verdict": "holds", "width": prepared.table.width}


def _forward(rel: SglangRelease, prepared: Prepared, size: int) -> Any:
    """The decode ``ForwardBatch`` stood in: what the backend's metadata builders read of it."""
    return types.SimpleNamespace(
        seq_lens=prepared.seq_lens,
        seq_lens_cpu=prepared.seq_lens.clone(),
        seq_lens_sum=int(prepared.seq_lens.sum()),
        batch_size=size,
        forward_mode=rel.forward_mode.DECODE,
        spec_info=None,
        encoder_lens=prepared.encoder_lens,
        req_pool_indices=prepared.req_pool_indices,
        req_to_token_pool=prepared.pool,
        kv_loc_plan=None,
        out_cache_loc=None,
    )


def pool_row_message(err: ReadOutOfRow, rows: Sequence[int]) -> str:
    """The read past a row, naming the pool row and whose it is: pool row 1 is request 0's, and "row 1"
    alone reads as request 1 to anyone who has not seen the pool hand rows out from 1."""
    whose = f"request {rows.index(err.row)}'s" if err.row in rows else "no request's"
    return (f"{err.attention}-attention gather read pool row {err.row} ({whose} req_to_token row) column "
            f"{err.column}, past the row (width {err.width}: columns 0..{err.width - 1})")


def run_metadata(
    rel: SglangRelease, context_len: int, batch: Sequence[Request], path: str
) -> dict[str, Any]:
    """Build the decode metadata for ``batch`` on ``path`` (``eager`` or ``replay``) and judge what it reads.

    Returns ``{"verdict": "holds"}``; ``{"verdict": "fails", "row", "column",
    "width", "message"}`` for the first read past a row, an extend output or a
    length handed to the kernel that is not the request's, or a consumed
    column that is not its own; ``{"verdict": "not run", "reason"}`` when the
    harness cannot run it (a stand-in missing, the release's own assertion,
    a batch whose writes do not fit the rows: the write side's failure).
    """
    steps = rel.range.steps
    step = f"laying the batch into the release's pool ({steps['pool'].name}, {steps['extend_strip'].name}, "
    step += f"{steps['decode_rule'].name})"
    try:
        prepared = prepare_batch(rel, context_len, batch)
    except ExtendMismatch as err:
        return extend_failure(err)
    except ReadOutOfRow as err:
        if err.attention != "write":
            raise
        return {"verdict": "not run",
                "reason": f"the batch does not fit the release's rows (the write side fails: row {err.row} "
                          f"column {err.column}, width {err.width})"}
    except Exception as exc:  # anything else is the adapter's gap: not run, naming the piece and line
        return _not_run(rel, exc, step)
    try:
        backend = _backend(rel, prepared, context_len)
        forward = _forward(rel, prepared, len(batch))
        if path == "eager":
            step = "FlashAttentionBackend.init_forward_metadata"
            backend.init_forward_metadata(forward)
        else:
            step = steps["replay"].name
            _replay(rel, backend, forward, prepared)
        step = "FlashAttentionBackend.forward_decode"
        calls = decode_calls(backend, forward, len(batch))
        step = f"judging the arguments forward_decode passed {kernel_calls.KERNEL}"
        return judge_calls(calls, prepared, batch)
    except ReadOutOfRow as err:  # the guard's judged observation: a read past the row
        return {
            "verdict": "fails",
            "headline": READ_PAST_ROW,
            "row": err.row,
            "column": err.column,
            "width": err.width,
            "message": pool_row_message(err, prepared.req_pool_indices.tolist()),
            "where": engine_frame(err, rel.root)[0],  # the release's line that indexed
        }
    except Exception as exc:  # anything else is the adapter's gap: not run, naming the piece and line
        return _not_run(rel, exc, step)


def run_reads(rel: SglangRelease, context_len: int, batch: Sequence[Request]) -> dict[str, Any]:
    """Both paths on the whole ``batch``, as the scheduler hands it over: ``{"paths": {path: verdict},
    "refused": bool}``.

    A release that asserts one request per batch on the eager path (0.5.12
    and older) refuses a batch of several requests there: that path's verdict
    is "not run", saying the release refuses the batch (``refused``, and
    ``why``), never the batch split into requests judged one by one (which
    would let the release hold on a batch it never runs). The CUDA-graph
    replay path, the default decode path, has no such assert: it is judged on
    the whole batch, as a server replays it.
    """
    eager = run_metadata(rel, context_len, batch, "eager")
    replay = run_metadata(rel, context_len, batch, "replay")
    refused = eager["verdict"] == "not run" and bool(eager.get("asserts")) and len(batch) > 1
    if not refused:
        return {"paths": {"eager": eager, "replay": replay}, "refused": False}
    why = eager["reason"]
    eager = {**eager, "refused": True,
             "reason": f"the release refuses a batch of {len(batch)} requests on the eager path: {why}"}
    return {"paths": {"eager": eager, "replay": replay}, "refused": True, "why": why}


def fa3_path(rel: SglangRelease) -> dict[str, Any]:
    """How the release builds the text page table, observed on a one-request batch (eager path): a
    ``per-request gather`` indexes the rows with a tensor of columns, a ``slice`` with a range."""
    try:
        prepared = prepare_batch(rel, 64, [(5, 3, 6)])
        prepared.table.keys.clear()
        _backend(rel, prepared, 64).init_forward_metadata(_forward(rel, prepared, 1))
    except Exception as exc:
        return {"path": "not run", "reason": _not_run(rel, exc, "FlashAttentionBackend.init_forward_metadata "
                                                       "(how the text page table is built)")["reason"]}
    kinds = prepared.table.keys
    if not kinds:
        return {"path": "not run", "reason": "the eager path read nothing from req_to_token"}
    return {"path": "per-request gather" if "gather" in kinds else "slice"}


def extend_failure(err: ExtendMismatch) -> dict[str, Any]:
    """The verdict when the release's own extend output is not the draw's: that step fails, named."""
    return {"verdict": "fails", "headline": EXTEND_WRONG, "row": err.request, "column": -1, "width": -1,
            "message": f"{EXTEND_WRONG}: {err}"}


def decode_calls(backend: Any, forward: Any, size: int) -> list[tuple[str, dict[str, Any]]]:
    """The release's ``forward_decode`` on the metadata just built, once for a self-attention and once for a
    cross-attention layer: each attention's recorded kernel calls, ``[(attention, arguments)]``.

    The queries are one row a request (a plain decode step), no new keys
    (``k=None``: the step's K/V write is the write side's, judged there).
    """
    out = []
    for attention in ("self", "cross"):
        RECORDER.calls.clear()
        backend.forward_decode(kernel_calls.queries(size), None, None,
                               kernel_calls.layer(attention == "cross"), forward, save_kv_cache=False)
        if not RECORDER.calls:
            raise AdapterGap("FlashAttentionBackend.forward_decode", f"the {attention}-attention decode "
                             f"called no {kernel_calls.KERNEL}: the judge has nothing the kernel reads")
        out += [(attention, call) for call in RECORDER.calls]
    RECORDER.calls.clear()
    return out


def judge_calls(calls: Sequence[tuple[str, dict[str, Any]]], prepared: Prepared,
                batch: Sequence[Request]) -> dict[str, Any]:
    """Every index and length each recorded kernel call reads, against the truth from the draw
    (:func:`~crossattn_sizing.engine.sglang.kernel_calls.judge_call`): a self-attention call reads each
    request's ``d`` decoder keys (columns ``[E, E + d)`` of its row), a cross-attention call its ``E``
    encoder keys (``[0, E)``)."""
    for attention, call in calls:
        if attention == "self":
            lengths = [int(r[2]) for r in batch]
            own = [prepared.ids[i][int(r[0]) : int(r[0]) + int(r[2])] for i, r in enumerate(batch)]
        else:
            lengths = [int(r[0]) for r in batch]
            own = [prepared.ids[i][: int(r[0])] for i, r in enumerate(batch)]
        problem = kernel_calls.judge_call(call, attention, lengths, own)
        if problem is not None:
            return {"verdict": "fails", "headline": KERNEL_ARGS_WRONG, "row": -1, "column": -1,
                    "width": prepared.table.width, "message": problem}
    return {"verdict": "holds"}


def _replay(rel: SglangRelease, backend: Any, forward: Any, prepared: Prepared) -> None:
    """CUDA-graph replay: the release's replay step, into buffers as capture sizes them.

    The step and its parameters are the release's (``_apply_cuda_graph_metadata``
    from 0.5.13, ``init_forward_metadata_replay_cuda_graph`` before); its
    arguments are passed by the names the release gives them.
    """
    import inspect

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
    method = rel.range.steps["replay"].name.partition(".")[2]
    step = getattr(backend, method)
    values = {
        "plan": None,
        "bs": bs,
        "req_pool_indices": forward.req_pool_indices,
        "seq_lens": forward.seq_lens,
        "seq_lens_sum": forward.seq_lens_sum,
        "encoder_lens": forward.encoder_lens,
        "forward_mode": forward.forward_mode,
        "spec_info": None,
        "seq_lens_cpu": forward.seq_lens_cpu,
        "out_cache_loc": None,
    }
    params = [p for p in inspect.signature(step).parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    unknown = [p.name for p in params if p.name not in values and p.default is p.empty]
    if unknown:
        replay = rel.range.steps["replay"]
        raise AdapterGap(replay.name, f"{method} takes {', '.join(unknown)}, which the harness does not know "
                         "how to pass (its signature changed)", replay.file)
    step(**{p.name: values[p.name] for p in params if p.name in values})
    if getattr(backend, "forward_metadata", None) is None:
        backend.forward_metadata = meta


__all__ = ["STAND_INS_DOC", "Missing", "SglangRelease", "fa3_path", "run_metadata", "run_reads", "run_write"]
