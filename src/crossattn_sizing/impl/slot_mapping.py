"""Slot mapping on a torch device: which KV-cache cell each token position uses.

The formulas are the engine's (docs/spec.md §5); this
module is the vectorised torch path, :mod:`crossattn_sizing.impl.triton_kernels`
holds the Triton kernel for the same job. Both read the block table the way the
engine does, with an unmasked load at ``row * row_stride + column``: a column
past the row reads the next row (or the modelled tail past the last row, see
:mod:`crossattn_sizing.impl.block_table`). Whether such a read may happen at all is
decided before the kernel runs, by the block table's guard.

A :class:`SlotLayout` (:mod:`crossattn_sizing.core.slot_layout`) fixes the kernel
block size and the DCP sharding. The engine's cross-attention path ignores
DCP, which is the layout ``C = 1`` on every rank; the consistent sharded
variant uses the group's ``C`` and ``I``.
"""

from __future__ import annotations

import torch

from crossattn_sizing.core.slot_layout import PAD_SLOT_ID, SlotLayout
from crossattn_sizing.impl.step import SlotStep

__all__ = ["global_positions", "token_requests", "torch_slot_mapping"]


def global_positions(local_len: int, layout: SlotLayout, device: torch.device | str) -> torch.Tensor:
    """:func:`global_position` of local indices ``0 .. local_len-1`` as an int64 tensor."""
    kbs, c, i = layout.kernel_block_size, layout.dcp_size, layout.interleave
    j = torch.arange(local_len, dtype=torch.int64, device=device)
    block, local = j // kbs, j % kbs
    return block * (kbs * c) + (local // i) * (i * c) + layout.rank * i + local % i


def token_requests(query_start_loc: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """For each token of a flattened step, the index of its request in the batch.

    ``output_size`` is passed so that on CUDA this does not synchronise with the host.
    """
    counts = (query_start_loc[1:] - query_start_loc[:-1]).to(torch.int64)
    batch = torch.arange(counts.numel(), dtype=torch.int64, device=query_start_loc.device)
    return torch.repeat_interleave(batch, counts, output_size=num_tokens)


def torch_slot_mapping(step: SlotStep, out: torch.Tensor) -> None:
    """Fill ``out`` with the slot of every token of a step, then ``PAD_SLOT_ID`` padding.

    ``step.table`` is the group's flat int32 storage (rows then tail),
    ``step.req_rows[b]`` the table row of batch entry ``b``, whose tokens are
    ``step.positions[query_start_loc[b]:query_start_loc[b+1]]``. ``out`` (int64) is at
    least as long as ``positions``; entries past the step's tokens become -1,
    as the engine pads for CUDA graphs.
    """
    table, row_stride, req_rows = step.table, step.row_stride, step.req_rows
    query_start_loc, positions, layout = step.query_start_loc, step.positions, step.layout
    n = positions.numel()
    if n:
        batch = token_requests(query_start_loc, n)
        rows = req_rows.to(torch.int64)[batch]
        vbs = layout.virtual_block_size
        column = positions // vbs
        offset = positions - column * vbs
        # The engine's unmasked load: the flat index may run into the next row.
        block = table[rows * row_stride + column].to(torch.int64)
        kbs = layout.kernel_block_size
        if layout.dcp_size == 1:
            slots = block * kbs + offset
        else:
            c, i = layout.dcp_size, layout.interleave
            owned = (offset // i) % c == layout.rank
            local = (offset // (i * c)) * i + offset % i
            slots = torch.where(owned, block * kbs + local, torch.full_like(block, PAD_SLOT_ID))
        out[:n] = slots
    out[n:] = PAD_SLOT_ID
