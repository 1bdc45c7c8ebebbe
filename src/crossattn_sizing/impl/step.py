"""The step metadata each kernel reads, as one frozen record per call, passed by keyword.

An engine builds one attention-metadata object per step and hands it to every
kernel; the harness does the same, so a new field is added here once, not to
every implementation's argument list (docs/implementation-interface.md). A
record holds what a kernel reads about the step; the tensors it computes on
(queries, keys, values) and the buffers it writes (caches, the slot output)
are keywords beside it, so that what a call mutates stays visible at the call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from crossattn_sizing.core.slot_layout import SlotLayout


@dataclass(frozen=True)
class SlotStep:
    """What one rank's slot mapping reads: the group's block table and the step's tokens.

    ``table`` is the group's flat block-table storage (``row_stride`` entries per
    row, then the tail; int32); batch entry ``b`` sits in table row
    ``req_rows[b]`` and owns tokens ``query_start_loc[b]:query_start_loc[b+1]``,
    whose sequence positions are ``positions`` (int64); ``layout`` is the rank's
    DCP slot layout.
    """

    table: torch.Tensor
    row_stride: int
    req_rows: torch.Tensor
    query_start_loc: torch.Tensor
    positions: torch.Tensor
    layout: SlotLayout


@dataclass(frozen=True)
class WriteStep:
    """What one rank's KV write reads beside the tokens and the caches.

    ``slots`` (int64, one per token) come from the slot mapping; -1 means write
    nothing. A cache-write setting an engine adds later (a quantisation scale,
    say) belongs here.
    """

    slots: torch.Tensor


@dataclass(frozen=True)
class AttentionStep:
    """What one rank's paged attention needs beside the query and the caches.

    ``table`` is the flat block-table storage (``row_stride`` entries per row,
    int32); batch entry ``b`` owns queries ``query_start_loc[b]:query_start_loc[b+1]``,
    row ``b`` and ``seq_lens[b]`` local keys; ``query_positions`` are the
    queries' global positions (for the causal mask); ``layout`` the rank's
    DCP slot layout; ``scale`` the softmax scale.
    """

    table: torch.Tensor
    row_stride: int
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    query_positions: torch.Tensor
    layout: SlotLayout
    causal: bool
    scale: float
