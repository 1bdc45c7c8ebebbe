"""KV-cache write by slot and paged attention read, in torch; and the DCP merge.

The cache of one group on one DCP rank is a pair of tensors
``[num_kernel_blocks, kbs, heads, head_dim]`` (keys, values); slot ``s`` is cell
``s % kbs`` of kernel block ``s // kbs``. The harness fills fresh caches with NaN
so a read of a cell the request does not own poisons the output.

Paged attention reads a request's keys through its row of the (gathered) block
table: local key ``j`` on a rank sits in column ``j // kbs`` at offset ``j % kbs``
and has sequence position :func:`~crossattn_sizing.core.slot_layout.global_position`.
Scores, softmax and the weighted sum are computed in fp32 whatever the cache
dtype, as the engine's kernels accumulate; each rank returns its output and
log-sum-exp (lse) so that DCP partials can be merged exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from crossattn_sizing.core.slot_layout import PAD_SLOT_ID
from crossattn_sizing.impl.slot_mapping import global_positions
from crossattn_sizing.impl.step import AttentionStep, WriteStep


def torch_write_kv(
    key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
    step: WriteStep,
) -> None:
    """Scatter token ``t``'s key and value (``[heads, head_dim]``) to ``step.slots[t]``; -1 skips.

    Slots other than -1 are distinct (the harness resolves duplicates first, see
    :func:`resolve_duplicate_slots`), so the scatter is deterministic.
    """
    slots = step.slots
    heads, head_dim = key_cache.shape[-2], key_cache.shape[-1]
    keep = slots >= 0
    idx = slots[keep]
    key_cache.view(-1, heads, head_dim)[idx] = key[keep].to(key_cache.dtype)
    value_cache.view(-1, heads, head_dim)[idx] = value[keep].to(value_cache.dtype)


def resolve_duplicate_slots(slots: torch.Tensor) -> torch.Tensor:
    """Keep only the last token (in batch order) of each slot; earlier ones become -1.

    Distinct live slots are an invariant, so this changes nothing in a correct
    run. In the unguarded overflow mode two requests can map tokens to the same
    cell; the engine's one-thread-per-token write then has an unspecified
    winner on a GPU. The model picks the last writer so runs are reproducible.
    """
    n = slots.numel()
    if n == 0:
        return slots
    valid = slots >= 0
    if not bool(valid.any()):
        return slots
    order = torch.arange(n, dtype=torch.int64, device=slots.device)
    size = int(slots.max().item()) + 1
    winner = torch.full((size,), -1, dtype=torch.int64, device=slots.device)
    winner.scatter_reduce_(0, slots[valid], order[valid], reduce="amax")
    keep = valid & (winner[slots.clamp(min=0)] == order)
    return torch.where(keep, slots, torch.full_like(slots, PAD_SLOT_ID))


def softmax_shift(scores: torch.Tensor) -> torch.Tensor:
    """What each row of ``scores`` is shifted by before ``exp``: its maximum, 0 for a row with no key.

    Shifting by the maximum keeps every ``exp`` at most 1 (raw scores past 88.7
    overflow fp32's exp to inf, and inf/inf is NaN); a row masked entirely to
    ``-inf`` is shifted by 0, so it sums to 0 instead of NaN.
    """
    row_max = scores.amax(dim=-1, keepdim=True)
    return torch.where(torch.isneginf(row_max), torch.zeros_like(row_max), row_max)


def torch_paged_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    step: AttentionStep,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of each query over its request's keys on this rank, read through the table.

    Batch entry ``b`` owns queries ``query_start_loc[b]:query_start_loc[b+1]``,
    row ``b`` of ``table`` (flat storage, ``row_stride`` entries per row) and
    ``seq_lens[b]`` local keys. Causal: a key is visible when its position is
    ``<=`` the query's. Returns fp32 ``out [Q, heads, head_dim]`` and
    ``lse [Q, heads]``; a query that sees no key gets 0 and ``-inf``.
    """
    table, row_stride, seq_lens = step.table, step.row_stride, step.seq_lens
    query_start_loc, query_positions = step.query_start_loc, step.query_positions
    layout, causal, scale = step.layout, step.causal, step.scale
    num_q, heads, head_dim = query.shape
    device = query.device
    out = torch.zeros(num_q, heads, head_dim, dtype=torch.float32, device=device)
    lse = torch.full((num_q, heads), float("-inf"), dtype=torch.float32, device=device)
    kbs = layout.kernel_block_size
    keys_flat = key_cache.view(-1, heads, head_dim)
    values_flat = value_cache.view(-1, heads, head_dim)
    starts = query_start_loc.tolist()
    lens = seq_lens.tolist()
    for b, n in enumerate(lens):
        q0, q1 = starts[b], starts[b + 1]
        if n <= 0 or q1 <= q0:
            continue
        j = torch.arange(n, dtype=torch.int64, device=device)
        # Unmasked row read as in the engine: a column past the width reads on.
        block = table[b * row_stride + j // kbs].to(torch.int64)
        slot = block * kbs + j % kbs
        keys = keys_flat[slot].to(torch.float32)
        values = values_flat[slot].to(torch.float32)
        q = query[q0:q1].to(torch.float32)
        scores = torch.einsum("qhd,khd->qhk", q, keys) * scale
        if causal:
            k_pos = global_positions(n, layout, device)
            visible = k_pos[None, :] <= query_positions[q0:q1, None]
            scores = scores.masked_fill(~visible[:, None, :], float("-inf"))
            has_keys = visible.any(dim=-1)[:, None, None]
        else:
            has_keys = torch.ones(q1 - q0, 1, 1, dtype=torch.bool, device=device)
        # has_keys comes from the mask, not from the softmax sum: a NaN read from a
        # poisoned cell must reach the output, not be mistaken for "no keys".
        safe_max = softmax_shift(scores)
        weights = torch.exp(scores - safe_max)
        total = weights.sum(dim=-1, keepdim=True)
        acc = torch.einsum("qhk,khd->qhd", weights, values)
        out[q0:q1] = torch.where(has_keys, acc / torch.where(has_keys, total, 1.0), 0.0)
        lse[q0:q1] = torch.where(
            has_keys, safe_max + torch.log(torch.where(has_keys, total, 1.0)), float("-inf")
        ).squeeze(-1)
    return out, lse


def lse_merge(outs: Sequence[torch.Tensor], lses: Sequence[torch.Tensor]) -> torch.Tensor:
    """Merge DCP partials: ``out = sum_r exp(lse_r - lse) * out_r`` with ``lse = logsumexp_r lse_r``.

    Each rank's output is normalised over its own keys only, so it must be
    re-weighted by its share of the softmax mass; a rank with ``lse = -inf``
    (no visible key) contributes nothing, and a query no rank saw stays 0.
    """
    if not outs:
        raise ValueError("merge needs at least one partial")
    stacked_lse = torch.stack([x.to(torch.float32) for x in lses])  # [C, Q, H]
    stacked_out = torch.stack([x.to(torch.float32) for x in outs])  # [C, Q, H, D]
    top = stacked_lse.amax(dim=0)
    safe_top = torch.where(torch.isneginf(top), torch.zeros_like(top), top)
    weights = torch.exp(stacked_lse - safe_top)  # exp(-inf) = 0 for empty ranks
    total = weights.sum(dim=0)
    # NaN from a poisoned read is not masked here: it must reach the output to be seen.
    merged = (weights[..., None] * stacked_out).sum(dim=0)
    has_keys = (~torch.isneginf(stacked_lse).all(dim=0))[..., None]
    return torch.where(has_keys, merged / torch.where(has_keys, total[..., None], 1.0), 0.0)
