"""The release's own KV-write, attention and merge kernels, found and called inside its worker.

Attention at ``C = 1`` goes through the release's Triton attention backend
(:meth:`ReleaseKernels.backend_attention`: its metadata builder, then
``TritonAttentionImpl.forward``), as an encoder-decoder model on that backend
runs it; the decode kernel serves DCP, whose merge needs an LSE the backend
does not return.

Imported by :mod:`crossattn_sizing.engine.vllm.release` only (it needs the release
on ``sys.path``). Each step of the implementation interface has a list of
places vLLM has kept the function (paths move between releases): the first
that imports is the one that runs, and its dotted name is the step's
provenance. A release that has none of them reports the step as missing, with
what was tried, and the harness's own kernel stands in for it (the client
says so in the implementation's name and provenance).

Only a missing ``vllm.*`` module means "not in this release"; any other
missing module propagates, so the client installs it and asks again, as for
the release's import.
"""

from __future__ import annotations

import importlib
from dataclasses import fields
from types import SimpleNamespace
from typing import Any

SLOT_MAPPING = "vllm.v1.worker.gpu.block_table.BlockTables.compute_slot_mappings"
"""The slot mapping runs through the release's ``BlockTables`` (its ``_compute_slot_mappings_kernel``)."""

CANDIDATES: dict[str, tuple[str, ...]] = {
    "write_kv": (
        "vllm.v1.attention.ops.triton_reshape_and_cache_flash.triton_reshape_and_cache_flash",
        "vllm.attention.ops.triton_reshape_and_cache_flash.triton_reshape_and_cache_flash",
    ),
    "paged_attention": (
        "vllm.v1.attention.ops.triton_decode_attention.decode_attention_fwd",
        "vllm.attention.ops.triton_decode_attention.decode_attention_fwd",
    ),
    "merge": (
        "vllm.v1.attention.ops.dcp.cp_lse_ag_out_ar",
        "vllm.v1.attention.ops.common.cp_lse_ag_out_ar",
        "vllm.attention.ops.common.cp_lse_ag_out_ar",
    ),
    "merge_pairs": (
        "vllm.v1.attention.ops.triton_merge_attn_states.merge_attn_states",
        "vllm.attention.ops.triton_merge_attn_states.merge_attn_states",
    ),
}
"""Where releases keep each kernel, newest layout first (dotted module path, then the function).

``merge`` is the release's DCP combination as its decode path does it: each
rank's partial corrected by ``correct_attn_out`` against every rank's LSE
(all-gathered), then summed (all-reduced). ``merge_pairs`` is the release's
two-way ``merge_attn_states``: it serves the shapes the correction kernel
cannot take (see :func:`correctable`), and a release without the DCP path.
"""

BACKEND_MODULE = "vllm.v1.attention.backends.triton_attn"
"""The Triton attention backend: what an encoder-decoder model runs on the Triton path (its metadata
builder, then ``TritonAttentionImpl.forward``, which calls ``unified_attention``)."""

BACKEND = f"{BACKEND_MODULE}.TritonAttentionImpl.forward"
"""The provenance of attention where the backend runs: its ``forward`` over its builder's metadata."""

BACKEND_PARTS = ("TritonAttentionImpl", "TritonAttentionMetadataBuilder")
METADATA_MODULE = "vllm.v1.attention.backend"
"""Where ``CommonAttentionMetadata`` and ``AttentionType`` live (the builder's input, the layer's kind)."""

TABLE_PAD = 128
"""Zero entries appended past the end of the table storage sent to the backend.

``unified_attention`` loads a tile's block-table entries unmasked (the keys
they name are masked), so its last tile may read up to a tile past a row:
inside the storage that is the next row, as in the engine; past the storage
end it must still be memory. A tile is at most 128 keys and a kernel block at
least one, so 128 entries cover it."""

NUM_KV_SPLITS = 4
"""Key splits of the decode kernel's first stage (what vLLM's Triton MLA decode passes); the second
stage combines them with their log-sum-exp, so a split count changes the order of sums, not the result."""


def correctable(dcp_size: int, head_dim: int) -> bool:
    """Whether the release's correction kernel takes this shape: it spans the ranks and the head
    dimension with ``tl.arange``, which needs powers of two (on a GPU too: other shapes do not compile)."""
    return all(n >= 1 and n & (n - 1) == 0 for n in (dcp_size, head_dim))


class RankGroup:
    """Rank ``rank``'s view of a DCP group whose ranks all live in this one process.

    The release's ``cp_lse_ag_out_ar`` reads ``world_size`` and
    ``rank_in_group``, all-gathers the LSEs and all-reduces the corrected
    output. Every rank's LSE is known before any rank runs, so the gather
    concatenates them in rank order, as a real group does; the all-reduce
    keeps what this rank contributes and the caller sums the ranks' parts.
    """

    def __init__(self, torch: Any, lses: list[Any], rank: int) -> None:
        self.torch = torch
        self.world_size = len(lses)
        self.rank_in_group = rank
        self.lses = lses
        self.contributed: Any = None

    def all_gather(self, tensor: Any, dim: int = 0) -> Any:
        """Hand the kernel every rank's LSE, after checking it gathered this rank's own."""
        torch = self.torch
        own = self.lses[self.rank_in_group].contiguous().view(torch.uint8)  # bitwise: NaN equals itself
        if not torch.equal(tensor.contiguous().view(torch.uint8), own):
            raise AssertionError("the release gathered an LSE other than this rank's own")
        return torch.cat(self.lses, dim=dim)

    def all_reduce(self, tensor: Any) -> Any:
        """Keep this rank's corrected partial; the driver sums the ranks' parts."""
        self.contributed = tensor  # the caller's own copy of this rank's partial, corrected in place
        return tensor


def find(dotted: str) -> Any:
    """The function a dotted name names, or ``None`` when its ``vllm.*`` module is not in this release."""
    module, _, attr = dotted.rpartition(".")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "vllm":
            return None
        raise
    return getattr(mod, attr, None)


class ReleaseKernels:
    """The kernels found in the imported release, by step, and how to call each as vLLM's backends do."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.functions: dict[str, Any] = {}
        self.provenance: dict[str, str | None] = {"slot_mapping": SLOT_MAPPING}
        self.tried: dict[str, list[str]] = {}
        for step, places in CANDIDATES.items():
            self.tried[step] = list(places)
            for dotted in places:
                fn = find(dotted)
                if fn is not None:
                    self.functions[step] = fn
                    self.provenance[step] = dotted
                    break
            else:
                self.provenance[step] = None
        self.backend = _find_backend()
        self.tried["backend"] = [f"{BACKEND_MODULE}.{part}" for part in BACKEND_PARTS]
        self.provenance["backend"] = BACKEND if self.backend is not None else None
        if self.provenance["merge"] is None and self.provenance["merge_pairs"] is not None:
            # A release without the DCP path: its two-way merge is how it combines partials.
            self.functions["merge"] = self.functions["merge_pairs"]
            self.provenance["merge"] = self.provenance["merge_pairs"]
            self.tried["merge"] += self.tried["merge_pairs"]

    def function(self, step: str) -> Any:
        """The release's kernel for ``step``; an error naming where it looked when it has none."""
        fn = self.functions.get(step)
        if fn is None:
            raise LookupError(f"this release has no {step} kernel (tried {', '.join(self.tried[step])})")
        return fn

    def write_kv(self, key: Any, value: Any, key_cache: Any, value_cache: Any, slots: Any) -> None:
        """``triton_reshape_and_cache_flash``, unquantised cache (``"auto"``, unit scales), in place."""
        one = self.torch.tensor(1.0, dtype=self.torch.float32)
        self.function("write_kv")(key, value, key_cache, value_cache, slots, "auto", one, one)

    def paged_attention(
        self, query: Any, key_cache: Any, value_cache: Any, req_to_token: Any, seq_lens: Any, scale: float
    ) -> tuple[Any, Any]:
        """``decode_attention_fwd``: row ``b`` of ``query`` over the first ``seq_lens[b]`` keys of its row.

        The output buffer is fp32 (the interface's), so the kernel's second
        stage stores its fp32 accumulator unrounded; the LSE is its own.
        """
        torch = self.torch
        num, heads = query.shape[0], query.shape[1]
        out = torch.zeros(num, heads, value_cache.shape[-1], dtype=torch.float32)
        lse = torch.zeros(num, heads, dtype=torch.float32)
        logits = torch.empty(num, heads, NUM_KV_SPLITS, value_cache.shape[-1] + 1, dtype=torch.float32)
        self.function("paged_attention")(
            query, key_cache, value_cache, out, lse, req_to_token, seq_lens, logits, NUM_KV_SPLITS, scale,
            key_cache.shape[1],
        )  # fmt: skip
        return out, lse

    def backend_attention(
        self, query: Any, key_cache: Any, value_cache: Any, table: Any, row_stride: int, query_start_loc: Any,
        seq_lens: Any, causal: bool, scale: float,
    ) -> Any:
        """The Triton backend as the engine runs it: its builder's metadata, then its ``forward``.

        Request ``b``'s row is ``table[b*row_stride:]`` (a view of the whole
        storage, so a read past the row lands in the next one, as in the
        engine); its queries are the last ``query_start_loc[b+1] -
        query_start_loc[b]`` of its ``seq_lens[b]`` tokens (the engine's
        convention: the caller checks the harness's positions keep it).
        Unquantised cache (``"auto"``, unit scales); the caches are stacked
        into the backend's ``[blocks, 2, block_size, heads, D]``. Returns the
        fp32 output (queries are passed as fp32, as for the decode kernel).
        """
        torch = self.torch
        impl_cls, builder_cls = self.backend  # type: ignore[misc]  # sent here only when found
        meta = importlib.import_module(METADATA_MODULE)
        num_reqs = int(seq_lens.numel())
        heads, head_size = int(query.shape[1]), int(query.shape[2])
        kv_heads, block_size = int(key_cache.shape[2]), int(key_cache.shape[1])
        storage = torch.cat([table.to(torch.int32), torch.zeros(TABLE_PAD, dtype=torch.int32)])
        block_table = storage.as_strided((num_reqs, row_stride), (row_stride, 1))
        lens = (query_start_loc[1:] - query_start_loc[:-1]).tolist()
        config = _stand_in_config(meta, heads, kv_heads, head_size, num_reqs)
        spec = _stand_in_spec(block_size, kv_heads, head_size, key_cache.dtype)
        builder = builder_cls(spec, ["crossattn.layer"], config, query.device)
        common = _common_metadata(
            meta.CommonAttentionMetadata,
            query_start_loc=query_start_loc,
            query_start_loc_cpu=query_start_loc.cpu(),
            seq_lens=seq_lens,
            num_reqs=num_reqs,
            num_actual_tokens=int(query.shape[0]),
            max_query_len=max(lens, default=0),
            max_seq_len=int(seq_lens.max()) if num_reqs else 0,
            block_table_tensor=block_table,
            slot_mapping=torch.full((int(query.shape[0]),), -1, dtype=torch.int64),
            causal=causal,
        )
        metadata = builder.build(0, common)
        kind = meta.AttentionType.DECODER if causal else meta.AttentionType.ENCODER_DECODER
        impl = impl_cls(
            num_heads=heads, head_size=head_size, scale=scale, num_kv_heads=kv_heads, alibi_slopes=None,
            sliding_window=None, kv_cache_dtype="auto", attn_type=kind,
        )  # fmt: skip
        one = torch.tensor(1.0, dtype=torch.float32)
        layer = SimpleNamespace(_q_scale=one, _k_scale=one, _v_scale=one)
        kv_cache = _backend_cache(torch, importlib.import_module(BACKEND_MODULE), key_cache, value_cache)
        output = torch.zeros(query.shape[0], heads, head_size, dtype=query.dtype)
        # forward reads key and value only for encoder self-attention; the KV write already ran.
        impl.forward(layer, query, query, query, kv_cache, metadata, output)
        return output

    def merge(self, outs: list[Any], lses: list[Any]) -> tuple[Any, Any, str]:
        """The ranks' partials combined as the release's DCP decode does it; ``(out, lse, what ran)``.

        With ``cp_lse_ag_out_ar`` and a shape its kernel takes: each rank calls
        it with its own partial and a :class:`RankGroup`, and the ranks' parts
        are summed (the all-reduce). Otherwise ``merge_attn_states`` folds them
        two at a time. The third item is the dotted name of what ran.
        """
        sharded = self.provenance["merge"] != self.provenance["merge_pairs"]
        if sharded and correctable(len(outs), outs[0].shape[-1]):
            return (*self._corrected(outs, lses), str(self.provenance["merge"]))
        return (*self._folded(outs, lses), str(self.provenance["merge_pairs"]))

    def _corrected(self, outs: list[Any], lses: list[Any]) -> tuple[Any, Any]:
        fn = self.function("merge")
        gathered = [lse.contiguous() for lse in lses]
        total, lse = None, None
        for rank, out in enumerate(outs):
            group = RankGroup(self.torch, gathered, rank)
            _, lse = fn(out.contiguous().clone(), gathered[rank], group, return_lse=True)
            total = group.contributed if total is None else total + group.contributed
        return total, lse.contiguous()  # type: ignore[union-attr]  # a merge has at least one rank

    def _folded(self, outs: list[Any], lses: list[Any]) -> tuple[Any, Any]:
        """``merge_attn_states`` two at a time; its LSE tensors are ``[heads, tokens]`` and contiguous
        (0.25 indexes them so)."""
        torch = self.torch
        fn = self.function("merge_pairs")
        out, lse = outs[0].contiguous(), lses[0].t().contiguous()
        for nxt_out, nxt_lse in zip(outs[1:], lses[1:], strict=True):
            merged = torch.empty_like(out)
            merged_lse = torch.empty_like(lse)
            fn(merged, out, lse, nxt_out.contiguous(), nxt_lse.t().contiguous(), merged_lse)
            out, lse = merged, merged_lse
        return out, lse.t().contiguous()


def _find_backend() -> tuple[Any, Any] | None:
    """``(TritonAttentionImpl, TritonAttentionMetadataBuilder)`` of the release, or ``None`` without them."""
    parts = [find(f"{BACKEND_MODULE}.{part}") for part in BACKEND_PARTS]
    if any(p is None for p in parts) or find(f"{METADATA_MODULE}.CommonAttentionMetadata") is None:
        return None
    return parts[0], parts[1]


def _backend_cache(torch: Any, module: Any, key_cache: Any, value_cache: Any) -> Any:
    """The harness's key and value caches (``[blocks, block_size, heads, D]``) in the backend's layout.

    0.25 states its shape (``get_kv_cache_shape``: ``[blocks, 2, block_size,
    heads, D]``, keys then values); 0.34 has no such method and takes
    ``[blocks, heads, block_size, 2 * D]`` as a view of ``[blocks, block_size,
    heads, 2 * D]`` storage (its ``forward`` transposes it back and splits the
    last dimension). Any other shape is refused, naming it.
    """
    blocks, _, heads, dim = (int(n) for n in key_cache.shape)
    backend = getattr(module, "TritonAttentionBackend", None)
    shape_of = getattr(backend, "get_kv_cache_shape", None)
    if shape_of is None:
        return torch.cat([key_cache, value_cache], dim=-1).transpose(1, 2)
    # Asked about a block of 16: the method refuses other sizes (the engine's selector takes multiples
    # of 16), while the kernel itself takes the harness's smaller kernel blocks; the layout is the same.
    shape = tuple(shape_of(blocks, 16, heads, dim, "auto"))
    if shape != (blocks, 2, 16, heads, dim):
        raise LookupError(f"TritonAttentionBackend.get_kv_cache_shape gives {shape}: a layout the harness "
                          f"cannot fill from caches of shape {tuple(key_cache.shape)}")  # fmt: skip
    return torch.stack([key_cache, value_cache], dim=1)


def _stand_in_spec(block_size: int, kv_heads: int, head_size: int, dtype: Any) -> Any:
    """The attention spec fields the Triton builder reads (0.25: the block size; 0.34 also the KV heads,
    head size and quantisation mode): an unquantised cache of the harness's shape."""
    quant = getattr(importlib.import_module("vllm.v1.kv_cache_interface"), "KVQuantMode", None)
    return SimpleNamespace(block_size=block_size, num_kv_heads=kv_heads, head_size=head_size, dtype=dtype,
                           kv_quant_mode=None if quant is None else quant.NONE)  # fmt: skip


def _stand_in_config(meta: Any, heads: int, kv_heads: int, head_size: int, num_reqs: int) -> Any:
    """The ``VllmConfig`` attributes the Triton builder reads, and nothing else.

    No CUDA graphs (``CUDAGraphMode.NONE``: eager, as on a CPU), no
    speculative decoding, no R-SWA window, no registered layers (so the head
    count comes from the model config). Building a real ``VllmConfig`` would resolve a model, a device
    and a platform, none of which the metadata depends on.
    """
    config_module = importlib.import_module("vllm.config")
    model = SimpleNamespace(
        get_num_attention_heads=lambda parallel_config=None: heads,
        get_num_kv_heads=lambda parallel_config=None: kv_heads,
        get_head_size=lambda: head_size,
        rswa_window=None,
    )
    return SimpleNamespace(
        model_config=model,
        parallel_config=SimpleNamespace(),
        speculative_config=None,
        scheduler_config=SimpleNamespace(max_num_seqs=max(num_reqs, 1)),
        compilation_config=SimpleNamespace(
            cudagraph_mode=config_module.CUDAGraphMode.NONE, cudagraph_capture_sizes=[],
            static_forward_context={},
        ),
    )


def _common_metadata(cls: Any, **values: Any) -> Any:
    """The release's ``CommonAttentionMetadata`` from the values its fields name (the rest defaulted).

    A field this release requires that is not among them is a refusal naming it.
    """
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})
