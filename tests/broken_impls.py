"""Deliberately broken implementations: each must be caught by a differential property.

Each one is a plausible slip in a paged-attention stack. If a property passes
on one of these, it has gone blind (see meta/test_meta_impl.py). They wrap the
working torch implementation and break exactly one thing.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from unittest import mock

import torch

from crossattn_sizing.core.slot_layout import PAD_SLOT_ID
from crossattn_sizing.impl import TorchImpl, attention
from crossattn_sizing.impl.attention import torch_paged_attention
from crossattn_sizing.impl.slot_mapping import token_requests


class SlotOffByOne(TorchImpl):
    """Every live slot is one cell too far (an offset computed from 1, not 0)."""

    name = "broken-slot-off-by-one"

    def slot_mapping(self, *, step, out):  # type: ignore[no-untyped-def]
        super().slot_mapping(step=step, out=out)
        live = out >= 0
        out[live] += 1


class InterleaveIgnored(TorchImpl):
    """DCP ownership by ``off % C`` instead of ``(off // I) % C``: wrong whenever ``I > 1``."""

    name = "broken-interleave-ownership"

    def slot_mapping(self, *, step, out):  # type: ignore[no-untyped-def]
        positions, layout = step.positions, step.layout
        n = positions.numel()
        if n:
            batch = token_requests(step.query_start_loc, n)
            rows = step.req_rows.to(torch.int64)[batch]
            vbs = layout.virtual_block_size
            column, offset = positions // vbs, positions % vbs
            block = step.table[rows * step.row_stride + column].to(torch.int64)
            c = layout.dcp_size
            owned = offset % c == layout.rank
            slots = block * layout.kernel_block_size + offset // c
            out[:n] = torch.where(owned, slots, torch.full_like(slots, PAD_SLOT_ID))
        out[n:] = PAD_SLOT_ID


class PaddingForgotten(TorchImpl):
    """Slots past the step's tokens are left as 0 instead of -1 (a CUDA-graph replay would write block 0)."""

    name = "broken-padding"

    def slot_mapping(self, *, step, out):  # type: ignore[no-untyped-def]
        super().slot_mapping(step=step, out=out)
        out[step.positions.numel() :] = 0


class MergeWithoutLse(TorchImpl):
    """DCP partials averaged, not re-weighted by their share of the softmax mass."""

    name = "broken-merge-no-lse"

    def merge(self, *, outs: Sequence[torch.Tensor], lses: Sequence[torch.Tensor]) -> torch.Tensor:
        return torch.stack([o.to(torch.float32) for o in outs]).mean(dim=0)


class ReadsOneColumnPast(TorchImpl):
    """The attention kernel reads column ``j // kbs + 1``: every key comes from the next entry."""

    name = "broken-reads-one-column-past"

    def paged_attention(self, *, query, key_cache, value_cache, step):  # type: ignore[no-untyped-def]
        return torch_paged_attention(query, key_cache, value_cache, replace(step, table=step.table[1:]))


class ReadsWholeBlocks(TorchImpl):
    """The attention kernel reads whole kernel blocks, ignoring the sequence length in the last one."""

    name = "broken-reads-whole-blocks"

    def paged_attention(self, *, query, key_cache, value_cache, step):  # type: ignore[no-untyped-def]
        kbs = step.layout.kernel_block_size
        rounded = (step.seq_lens + kbs - 1) // kbs * kbs
        return torch_paged_attention(query, key_cache, value_cache, replace(step, seq_lens=rounded))


class CausalMaskDropped(TorchImpl):
    """Self-attention without the causal mask: prefill queries see later tokens."""

    name = "broken-no-causal-mask"

    def paged_attention(self, *, query, key_cache, value_cache, step):  # type: ignore[no-untyped-def]
        return torch_paged_attention(query, key_cache, value_cache, replace(step, causal=False))


class KeysAndValuesSwapped(TorchImpl):
    """The KV write stores the key in the value cache and the value in the key cache."""

    name = "broken-kv-swapped"

    def write_kv(self, *, key, value, key_cache, value_cache, step):  # type: ignore[no-untyped-def]
        super().write_kv(key=value, value=key, key_cache=key_cache, value_cache=value_cache, step=step)


def _no_shift(scores: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(scores[..., :1])


class SoftmaxWithoutMax(TorchImpl):
    """Softmax as ``exp(s) / sum(exp(s))`` without subtracting the row maximum: inf/inf past s = 88.7.

    The working kernel with its shift patched to 0 for this call, so it
    exponentiates raw scores and is otherwise the same kernel.
    """

    name = "broken-softmax-without-max"

    def paged_attention(self, *, query, key_cache, value_cache, step):  # type: ignore[no-untyped-def]
        with mock.patch.object(attention, "softmax_shift", _no_shift):
            return torch_paged_attention(query, key_cache, value_cache, step)


class MergeEmptyRankAsZeroLse(TorchImpl):
    """The DCP merge replaces an empty rank's ``lse = -inf`` by 0 (a log(0) guard), so its zero
    output gets weight ``exp(-lse_max)`` and drags the merged output toward 0."""

    name = "broken-merge-empty-rank"

    def merge(self, *, outs: Sequence[torch.Tensor], lses: Sequence[torch.Tensor]) -> torch.Tensor:
        zeroed = [torch.where(torch.isneginf(x), torch.zeros_like(x), x) for x in lses]
        return super().merge(outs=outs, lses=zeroed)


class LseInBaseTwo(TorchImpl):
    """The kernel returns ``log2(sum(exp2(...)))`` (an exp2 kernel's lse) where the merge expects
    the natural log: partials are re-weighted by ``2**(lse_r - lse)`` instead of ``e**(...)``."""

    name = "broken-lse-base-2"

    def paged_attention(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        out, lse = super().paged_attention(*args, **kwargs)
        return out, lse / math.log(2.0)


BROKEN_SLOT_MAPPINGS = {cls.name: cls for cls in (SlotOffByOne, InterleaveIgnored, PaddingForgotten)}
"""Caught by the slot-mapping property."""

BROKEN_CROSS = {cls.name: cls for cls in (SlotOffByOne, MergeWithoutLse, ReadsOneColumnPast,
                                          ReadsWholeBlocks, KeysAndValuesSwapped, InterleaveIgnored,
                                          SoftmaxWithoutMax, MergeEmptyRankAsZeroLse, LseInBaseTwo)}
"""Caught by the cross-attention property (sharded under DCP for the merge and ownership)."""

BROKEN_SELF = {cls.name: cls for cls in (SlotOffByOne, MergeWithoutLse, ReadsOneColumnPast, ReadsWholeBlocks,
                                         CausalMaskDropped, KeysAndValuesSwapped, InterleaveIgnored,
                                         SoftmaxWithoutMax, MergeEmptyRankAsZeroLse, LseInBaseTwo)}
"""Caught by the self-attention property."""



class MisbehavesOnRank1(TorchImpl):
    """DCP rank 1 misbehaves inside its attention kernel; for the distributed backend only."""

    def misbehave(self) -> None:
        raise NotImplementedError

    def paged_attention(self, *, query, key_cache, value_cache, step):  # type: ignore[no-untyped-def]
        if step.layout.rank == 1:
            self.misbehave()
        return super().paged_attention(query=query, key_cache=key_cache, value_cache=value_cache, step=step)


class DiesOnRank1(MisbehavesOnRank1):
    """Rank 1's process exits (a crashed kernel)."""

    name = "broken-dies-on-rank-1"

    def misbehave(self) -> None:
        os._exit(17)


class HangsOnRank1(MisbehavesOnRank1):
    """Rank 1 never returns (a deadlocked kernel)."""

    name = "broken-hangs-on-rank-1"

    def misbehave(self) -> None:
        while True:
            time.sleep(60)
