"""Triton kernels: slot mapping, KV-cache write and paged attention, in the engine's own language.

On CUDA they are compiled. On CPU they run in Triton's interpreter, which must
be chosen *before this module is imported*: ``@triton.jit`` decides at
decoration time whether it builds a compiled or an interpreted function, from
``TRITON_INTERPRET``. :func:`crossattn_sizing.impl.impl_from_spec` sets
``TRITON_INTERPRET=1`` for ``--impl triton --device cpu`` before importing this
module; :data:`INTERPRETED` records which kind was built so a mismatch (e.g. the
module imported earlier without the variable) is one clear error instead of a
crash inside a launch.

Kernel arguments that vary per example (kernel block size, DCP size,
interleave, rank, strides, counts, the causal flag) are runtime values, not
``constexpr``, and are listed in each kernel's ``do_not_specialize``: Triton
otherwise specialises an integer argument on its value pattern (1 becomes a
constant, a multiple of 16 gets a divisibility hint), which makes one compiled
kernel per pattern, hundreds over a Hypothesis run on a GPU. The ``constexpr``
left are tile sizes (``tl.arange`` and ``tl.dot`` need them at compile time),
rounded up to a few powers of two and masked, so one kernel per dtype serves
every drawn shape. tests/test_triton_keys.py pins the number of distinct
specialisation keys.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from crossattn_sizing.core.slot_layout import PAD_SLOT_ID
from crossattn_sizing.impl.step import AttentionStep, SlotStep, WriteStep

_SLOT_BLOCK = 256
_WRITE_TOKENS = 64
# Keys per online-softmax step and queries per program. tl.dot needs every tile
# dimension >= 16 on a GPU (hence also D_PAD >= 16); 64 keys keep the fp32 tiles
# small in registers and cut the interpreter's per-step overhead on CPU.
_ATTENTION_TILE = 64
_ATTENTION_QUERIES = 16
# tl.arange needs a power of two; below 16 lanes a row is masked, not given its own kernel.
_WRITE_MIN_ELEMS = 16
_WRITE_MAX_ELEMS = 128

SLOT_MAPPING_RUNTIME = ("row_stride", "num_tokens", "pad_to", "kbs", "dcp_size", "interleave", "rank")
WRITE_RUNTIME = ("num_tokens", "row_elems")
ATTENTION_RUNTIME = (
    "row_stride", "num_heads", "head_dim", "kbs", "dcp_size", "interleave", "rank", "causal",
)  # fmt: skip
"""The integer arguments of each kernel that Triton must not specialise on (see the module's docstring)."""


@triton.jit(do_not_specialize=SLOT_MAPPING_RUNTIME)
def _slot_mapping_kernel(
    table_ptr,  # int32 [rows * row_stride + tail], flat
    row_stride,
    req_rows_ptr,  # int32 [num_reqs]
    query_start_loc_ptr,  # int32 [num_reqs + 1]
    positions_ptr,  # int64 [num_tokens]
    out_ptr,  # int64 [pad_to]
    num_tokens,
    pad_to,
    kbs,
    dcp_size,
    interleave,
    rank,
    PAD: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # One program per request, plus a last one that pads the tail of the buffer.
    b = tl.program_id(0)
    if b == tl.num_programs(0) - 1:
        for start in range(num_tokens, pad_to, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            pad = tl.full([BLOCK], PAD, tl.int64)
            tl.store(out_ptr + offs, pad, mask=offs < pad_to)
        return
    row = tl.load(req_rows_ptr + b).to(tl.int64)
    first = tl.load(query_start_loc_ptr + b)
    last = tl.load(query_start_loc_ptr + b + 1)
    vbs = kbs * dcp_size
    for start in range(first, last, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        live = offs < last
        pos = tl.load(positions_ptr + offs, mask=live, other=0).to(tl.int64)
        column = pos // vbs
        offset = pos - column * vbs
        # Unmasked, as in the engine: a column past the row reads the next row.
        block = tl.load(table_ptr + row * row_stride + column).to(tl.int64)
        owned = ((offset // interleave) % dcp_size) == rank
        local = (offset // (interleave * dcp_size)) * interleave + offset % interleave
        slot = tl.where(owned, block * kbs + local, PAD)
        tl.store(out_ptr + offs, slot, mask=live)


@triton.jit(do_not_specialize=WRITE_RUNTIME)
def _write_kv_kernel(
    key_ptr,  # [T, heads * head_dim]
    value_ptr,
    key_cache_ptr,  # [cells, heads * head_dim]
    value_cache_ptr,
    slots_ptr,  # int64 [T]
    num_tokens,
    row_elems,
    BLOCK_T: tl.constexpr,
    BLOCK_E: tl.constexpr,
):
    # A tile of tokens per program: each token's heads*head_dim row goes to its slot.
    t = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)
    t_live = t < num_tokens
    slot = tl.load(slots_ptr + t, mask=t_live, other=-1)
    keep = t_live & (slot >= 0)
    safe = tl.where(keep, slot, 0)
    for start in range(0, row_elems, BLOCK_E):
        e = start + tl.arange(0, BLOCK_E)
        mask = keep[:, None] & (e < row_elems)[None, :]
        src = t[:, None] * row_elems + e[None, :]
        dst = safe[:, None] * row_elems + e[None, :]
        k = tl.load(key_ptr + src, mask=mask)
        v = tl.load(value_ptr + src, mask=mask)
        tl.store(key_cache_ptr + dst, k.to(key_cache_ptr.dtype.element_ty), mask=mask)
        tl.store(value_cache_ptr + dst, v.to(value_cache_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=ATTENTION_RUNTIME)
def _paged_attention_kernel(
    q_ptr,  # [Q, H, D]
    key_cache_ptr,  # [cells, H, D]
    value_cache_ptr,
    table_ptr,  # int32, flat; row b belongs to batch entry b
    row_stride,
    query_start_loc_ptr,  # int32 [num_reqs + 1]
    seq_lens_ptr,  # int32 [num_reqs]: keys this rank holds per request
    query_pos_ptr,  # int64 [Q]
    out_ptr,  # fp32 [Q, H, D]
    lse_ptr,  # fp32 [Q, H]
    scale,
    num_heads,
    head_dim,
    kbs,
    dcp_size,
    interleave,
    rank,
    causal,
    BLOCK_Q: tl.constexpr,
    TILE: tl.constexpr,
    D_PAD: tl.constexpr,
):
    # One program per (request, head, block of BLOCK_Q queries): an online softmax
    # over tiles of TILE local keys. Each key looks up its own column, so a tile may
    # span several kernel blocks of any size (no power-of-two padding of kbs).
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    q_first = tl.load(query_start_loc_ptr + b).to(tl.int64) + tl.program_id(2) * BLOCK_Q
    q_last = tl.load(query_start_loc_ptr + b + 1).to(tl.int64)
    if q_first >= q_last:
        return
    qi = q_first + tl.arange(0, BLOCK_Q)
    q_live = qi < q_last
    n = tl.load(seq_lens_ptr + b).to(tl.int64)
    d = tl.arange(0, D_PAD)
    d_mask = d < head_dim
    q_cell = (qi[:, None] * num_heads + h) * head_dim + d[None, :]
    q = tl.load(q_ptr + q_cell, mask=q_live[:, None] & d_mask[None, :], other=0.0).to(tl.float32)
    q_pos = tl.load(query_pos_ptr + qi, mask=q_live, other=0)
    m_i = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, D_PAD], tl.float32)
    # Visible keys are counted rather than inferred from l_i > 0, so that a NaN
    # read from a poisoned cell reaches the output instead of reading as "no keys".
    seen = tl.zeros([BLOCK_Q], tl.int32)
    for start in range(0, n, TILE):
        j = start + tl.arange(0, TILE).to(tl.int64)
        key_live = j < n
        column = j // kbs
        local = j % kbs
        # Not masked by the row width, as in the engine: the guard ran on the host.
        block = tl.load(table_ptr + b * row_stride + column, mask=key_live, other=0).to(tl.int64)
        cell = ((block * kbs + local)[:, None] * num_heads + h) * head_dim + d[None, :]
        kv_mask = key_live[:, None] & d_mask[None, :]
        k = tl.load(key_cache_ptr + cell, mask=kv_mask, other=0.0).to(tl.float32)
        v = tl.load(value_cache_ptr + cell, mask=kv_mask, other=0.0).to(tl.float32)
        # fp32 products and sums ("ieee"): TF32 would break the fp32 tolerance.
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        visible = q_live[:, None] & key_live[None, :]
        if causal != 0:
            k_pos = (
                column * kbs * dcp_size
                + (local // interleave) * (interleave * dcp_size)
                + rank * interleave
                + local % interleave
            )
            visible = visible & (k_pos[None, :] <= q_pos[:, None])
        s = tl.where(visible, s, float("-inf"))
        seen += tl.sum(visible.to(tl.int32), axis=1)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        l_i = l_i * alpha + tl.sum(p, axis=1)
        m_i = m_new
    has_keys = seen > 0
    denom = tl.where(has_keys, l_i, 1.0)
    out = tl.where(has_keys[:, None], acc / denom[:, None], 0.0)
    lse = tl.where(has_keys, m_i + tl.log(denom), float("-inf"))
    tl.store(out_ptr + q_cell, out, mask=q_live[:, None] & d_mask[None, :])
    tl.store(lse_ptr + qi * num_heads + h, lse, mask=q_live)


INTERPRETED: bool = isinstance(_slot_mapping_kernel, InterpretedFunction)
"""Whether the kernels above were built for Triton's CPU interpreter (``TRITON_INTERPRET=1``)."""


def triton_slot_mapping(step: SlotStep, out: torch.Tensor) -> None:
    """Launch the slot-mapping kernel; same contract as the torch path."""
    table, row_stride, req_rows = step.table, step.row_stride, step.req_rows
    query_start_loc, positions, layout = step.query_start_loc, step.positions, step.layout
    num_reqs = req_rows.numel()
    _slot_mapping_kernel[(num_reqs + 1,)](
        table,
        row_stride,
        req_rows,
        query_start_loc,
        positions,
        out,
        positions.numel(),
        out.numel(),
        layout.kernel_block_size,
        layout.dcp_size,
        layout.interleave,
        layout.rank,
        PAD=PAD_SLOT_ID,
        BLOCK=_SLOT_BLOCK,
    )


def triton_write_kv(
    key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
    step: WriteStep,
) -> None:
    """Launch the KV write kernel: one program per token, -1 slots skipped."""
    slots = step.slots
    num_tokens = slots.numel()
    if num_tokens == 0:
        return
    row_elems = key_cache.shape[-2] * key_cache.shape[-1]
    _write_kv_kernel[(triton.cdiv(num_tokens, _WRITE_TOKENS),)](
        key.contiguous(),
        value.contiguous(),
        key_cache,
        value_cache,
        slots.contiguous(),
        num_tokens,
        row_elems,
        BLOCK_T=_WRITE_TOKENS,
        BLOCK_E=min(max(triton.next_power_of_2(row_elems), _WRITE_MIN_ELEMS), _WRITE_MAX_ELEMS),
    )


def triton_paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    step: AttentionStep,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the paged attention kernel; same contract as the torch path."""
    table, row_stride, seq_lens = step.table, step.row_stride, step.seq_lens
    query_start_loc, query_positions = step.query_start_loc, step.query_positions
    layout, causal, scale = step.layout, step.causal, step.scale
    num_q, heads, head_dim = query.shape
    out = torch.zeros(num_q, heads, head_dim, dtype=torch.float32, device=query.device)
    lse = torch.full((num_q, heads), float("-inf"), dtype=torch.float32, device=query.device)
    if num_q == 0:
        return out, lse
    num_reqs = seq_lens.numel()
    most_queries = int((query_start_loc[1:] - query_start_loc[:-1]).max().item()) if num_reqs else 0
    if most_queries == 0:
        return out, lse
    _paged_attention_kernel[(num_reqs, heads, triton.cdiv(most_queries, _ATTENTION_QUERIES))](
        query.contiguous(),
        key_cache,
        value_cache,
        table,
        row_stride,
        query_start_loc,
        seq_lens,
        query_positions.to(torch.int64).contiguous(),
        out,
        lse,
        float(scale),
        heads,
        head_dim,
        layout.kernel_block_size,
        layout.dcp_size,
        layout.interleave,
        layout.rank,
        int(bool(causal)),
        BLOCK_Q=_ATTENTION_QUERIES,
        TILE=_ATTENTION_TILE,
        D_PAD=max(16, triton.next_power_of_2(head_dim)),
    )
    return out, lse
