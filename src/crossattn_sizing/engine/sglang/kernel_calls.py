"""What FA3's decode kernel reads, as the release's backend hands it: recorded at the call, then judged.

The read side used to judge the decode metadata's fields. A GPU reads only
what ``forward_decode`` passes to ``flash_attn_with_kvcache``: the query
tensor and its offsets (``cu_seqlens_q``, ``max_seqlen_q``), the key lengths
(``cache_seqlens``), the page table's columns, and, only with new keys, the
new keys' offsets. So the harness runs the release's own ``forward_decode``
for a self-attention and a cross-attention layer with
:class:`KernelRecorder` standing in for the kernel (the function the backend
module imports), and :func:`judge_calls` checks every index and length in
each recorded call against the truth from the draw, and nothing the call does
not pass. Imports torch (the worker's side).
"""

from __future__ import annotations

import enum
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from crossattn_sizing.engine.adapter import AdapterGap

KERNEL = "flash_attn_with_kvcache"
"""The attention call FA3's ``forward_decode`` makes (the name the backend module imports)."""

HEADS, KV_HEADS, HEAD_DIM = 2, 1, 4
"""The stand-in layers' shape: grouped-query heads, tiny (the recorder computes nothing)."""

QUERY_TOKENS = 1
"""Query tokens each request has at a plain decode step (no speculative decoding): the truth for
``cu_seqlens_q`` and ``max_seqlen_q``."""

KNOWN = frozenset({
    "q", "k_cache", "v_cache", "page_table", "cache_seqlens", "cu_seqlens_q", "max_seqlen_q", "max_seqlen_k",
    "cu_seqlens_k_new", "k", "v",
    # Not an index or a length: how the kernel computes, judged by the attention property where it is.
    "softmax_scale", "causal", "window_size", "softcap", "num_splits", "ver", "return_softmax_lse", "out",
    "scheduler_metadata", "k_descale", "v_descale", "q_descale", "sinks", "pack_gqa", "sm_margin",
})  # fmt: skip
"""Arguments the judge knows: any other the release passes (not None) leaves the call unjudged
(:class:`UnjudgedArgument`: not run), never passed over as if it were not read."""


class UnjudgedArgument(AdapterGap):
    """The release passes the kernel an argument the judge does not know how to check: not run."""

    def __init__(self, message: str) -> None:
        super().__init__(KERNEL, f"{KERNEL}: {message}; the judge cannot tell what the kernel reads")


class AttentionType(enum.Enum):
    """``sglang.srt.layers.radix_attention.AttentionType`` stood in: the two members the decode compares."""

    DECODER = "decoder"
    ENCODER_ONLY = "encoder_only"


@dataclass
class KernelRecorder:
    """``flash_attn_with_kvcache`` stood in: each call's arguments by name, and zeros as its output."""

    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Record the call; answer an output of the query's rows (and an LSE where the call asks one)."""
        if len(args) > 3:
            raise UnjudgedArgument(f"called with {len(args)} positional arguments (the judge names "
                                   "only q, k_cache, v_cache)")
        call = {**dict(zip(("q", "k_cache", "v_cache"), args, strict=False)), **kwargs}
        self.calls.append({k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in call.items()})
        q, v_cache = call["q"], call["v_cache"]
        out = torch.zeros(*q.shape[:-1], v_cache.shape[-1], dtype=q.dtype)
        if call.get("return_softmax_lse"):
            return out, torch.zeros(q.shape[-2], q.shape[0]), None
        return out


class DecodeKVPool:
    """``token_to_kv_pool`` stood in for the decode: one K and one V buffer of zeros, slot-indexed."""

    def __init__(self, slots: int) -> None:
        self.k = torch.zeros(slots, KV_HEADS, HEAD_DIM)
        self.v = torch.zeros(slots, KV_HEADS, HEAD_DIM)

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer's K and V buffers (every layer shares them: the kernel computes nothing here)."""
        return self.k, self.v

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        """The layer's K buffer."""
        return self.k

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        """The layer's V buffer."""
        return self.v


def paged_kv_view(buffer: torch.Tensor, page_size: int, heads: int, dim: int) -> torch.Tensor:
    """``mem_cache/layout/paged_view.paged_kv_view`` stood in: ``[slots, H, D]`` as pages of ``page_size``."""
    return buffer.view(-1, page_size, heads, dim)


def paged_view(buffer: torch.Tensor, page_size: int) -> torch.Tensor:
    """``mem_cache/layout/paged_view.paged_view`` stood in: the slot axis as pages of ``page_size``."""
    return buffer.view(-1, page_size, *buffer.shape[1:])


def layer(cross: bool) -> Any:
    """A decoder layer as ``forward_decode`` reads it (``RadixAttention`` stood in)."""
    return types.SimpleNamespace(
        layer_id=0, is_cross_attention=cross, attn_type=AttentionType.DECODER, tp_q_head_num=HEADS,
        tp_k_head_num=KV_HEADS, tp_v_head_num=KV_HEADS, head_dim=HEAD_DIM, qk_head_dim=HEAD_DIM,
        v_head_dim=HEAD_DIM, scaling=HEAD_DIM**-0.5, sliding_window_size=-1, logit_cap=0.0, k_scale=None,
        v_scale=None,
    )


def queries(batch_size: int) -> torch.Tensor:
    """The step's queries, one row per request (``[bs, H * D]``, as the model hands ``forward_decode``)."""
    return torch.zeros(batch_size * QUERY_TOKENS, HEADS * HEAD_DIM)


def judge_call(call: dict[str, Any], attention: str, lengths: Sequence[int],
               own: Sequence[torch.Tensor]) -> str | None:
    """The first index or length ``call`` hands the kernel that is not the request's; None if none.

    ``lengths[i]`` is request ``i``'s true key length for this attention (its
    decoder tokens for self, its encoder tokens for cross) and ``own[i]`` its
    slots for them, in order. Judged, where the call passes them: the query
    rows against ``cu_seqlens_q`` (request ``i``'s queries are rows
    ``[cu[i], cu[i+1])`` of ``q``) and ``max_seqlen_q``; ``cache_seqlens[i]``
    and ``max_seqlen_k`` against the key length; the first ``cache_seqlens[i]``
    columns of ``page_table`` row ``i`` against the request's own slots;
    ``cu_seqlens_k_new`` only where new keys (``k``) are passed, the only
    case the kernel reads it.
    """
    unknown = sorted(k for k, v in call.items() if k not in KNOWN and v is not None)
    if unknown:
        raise UnjudgedArgument(f"{attention}-attention call passes {', '.join(unknown)}, which the "
                               "judge does not check")
    if call.get("k") is not None or call.get("v") is not None:
        raise UnjudgedArgument(f"{attention}-attention call appends new keys (k, v, cu_seqlens_k_new)"
                               ", which the judge does not check at a decode step")
    said = f"the {attention}-attention call ({KERNEL})"
    n = len(lengths)
    rows = int(call["q"].reshape(-1, call["q"].shape[-2] * call["q"].shape[-1]).shape[0])
    cu_q = call.get("cu_seqlens_q")
    if cu_q is not None:
        cu = [int(x) for x in cu_q.flatten()]
        if len(cu) < n + 1:
            return f"{said} hands the kernel cu_seqlens_q of {len(cu)} entries for {n} requests"
        for i in range(n + 1):
            if cu[i] != i * QUERY_TOKENS:
                return (f"{said} hands the kernel cu_seqlens_q[{i}] = {cu[i]}: request {i}'s queries would "
                        f"start at row {cu[i]} of q ({rows} rows), its own start at row {i * QUERY_TOKENS}")
    elif rows != n * QUERY_TOKENS:
        return f"{said} hands the kernel {rows} query rows (no cu_seqlens_q) for {n} requests"
    max_q = call.get("max_seqlen_q")
    if max_q is not None and int(max_q) < QUERY_TOKENS:
        return f"{said} hands the kernel max_seqlen_q {int(max_q)}: each request has {QUERY_TOKENS} query"
    max_k = call.get("max_seqlen_k")
    if max_k is not None and int(max_k) < max(lengths):
        return (f"{said} hands the kernel max_seqlen_k {int(max_k)}; the longest request has "
                f"{max(lengths)} keys")
    seqlens = call.get("cache_seqlens")
    if seqlens is None:
        raise UnjudgedArgument(f"{attention}-attention call passes no cache_seqlens (the judge "
                               "needs each request's key length)")
    table = call.get("page_table")
    if table is None:
        raise UnjudgedArgument(f"{attention}-attention call passes no page_table")
    for i, true in enumerate(lengths):
        got = int(seqlens[i]) if i < seqlens.numel() else None
        if got != true:
            return f"{said} hands the kernel cache_seqlens {got} for request {i}, whose true length is {true}"
        if true == 0:
            continue
        if i >= table.shape[0] or table.shape[-1] < true:
            return (f"{said} hands the kernel a page_table of shape {tuple(table.shape)}; request {i} "
                    f"reads {true} columns of row {i}")
        cols = table[i, :true].to(torch.int64)
        bad = (cols != own[i][:true]).nonzero()
        if bad.numel():
            j = int(bad[0])
            return (f"{said} hands the kernel page_table[{i}, {j}] = slot {int(cols[j])}; request {i}'s own "
                    f"{attention}-attention slot {j} is {int(own[i][j])}")
    return None
