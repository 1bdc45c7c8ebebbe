"""The step metadata paged attention reads, as one frozen record passed by keyword.

An engine builds one attention-metadata object per step and hands it to every
kernel; the harness does the same, so a new field is added here once, not to
every implementation's argument list (docs/implementation-interface.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from crossattn_sizing.slot_mapping import SlotLayout


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
