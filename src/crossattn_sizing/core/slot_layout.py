"""Where each token position lives on a DCP rank: the slot layout, as plain integers (no torch).

A :class:`SlotLayout` fixes the kernel block size and the DCP sharding; the
formulas are the engine's (docs/spec.md §5). It is its own module because both
the step records (:mod:`crossattn_sizing.impl.step`) and the torch slot mapping
(:mod:`crossattn_sizing.impl.slot_mapping`, which reads those records) need it:
kept in either, the two would import each other.
"""

from __future__ import annotations

from dataclasses import dataclass

PAD_SLOT_ID = -1
"""Slot meaning "write nothing": a token another DCP rank owns, or padding past the step."""


@dataclass(frozen=True)
class SlotLayout:
    """How positions map to cells on one DCP rank.

    A row entry (one kernel block on each rank) stands for a virtual block of
    ``kernel_block_size * dcp_size`` positions, dealt to the ranks in runs of
    ``interleave``; rank ``rank`` keeps its share densely in its copy of the block.
    """

    kernel_block_size: int
    dcp_size: int = 1
    interleave: int = 1
    rank: int = 0

    def __post_init__(self) -> None:
        # A bad layout is a harness bug, not user input: the config validation in
        # crossattn_sizing.core.config already refuses interleaves that do not divide kbs.
        if self.kernel_block_size < 1 or self.dcp_size < 1 or self.interleave < 1:
            raise ValueError(f"invalid slot layout {self}")
        if not 0 <= self.rank < self.dcp_size:
            raise ValueError(f"rank {self.rank} outside [0, {self.dcp_size})")
        if self.dcp_size > 1 and self.kernel_block_size % self.interleave:
            raise ValueError(f"interleave {self.interleave} must divide kbs {self.kernel_block_size}")

    @property
    def virtual_block_size(self) -> int:
        """Positions one row entry covers across all ranks: ``kbs * C``."""
        return self.kernel_block_size * self.dcp_size


def local_length(seq_len: int, layout: SlotLayout) -> int:
    """Tokens of the first ``seq_len`` positions that ``layout.rank`` holds.

    ``(s // (C*I)) * I + min(max(s % (C*I) - r*I, 0), I)``: the rank gets ``I``
    per full round of ``C*I`` positions plus its part of the last round.
    """
    c, i, r = layout.dcp_size, layout.interleave, layout.rank
    rounds, rest = divmod(seq_len, c * i)
    return rounds * i + min(max(rest - r * i, 0), i)


def global_position(local_index: int, layout: SlotLayout) -> int:
    """Sequence position of a rank's ``local_index``-th token (inverse of the sharding).

    A rank's tokens fill its blocks densely in position order, so local index
    ``j`` is virtual block ``j // kbs``, local offset ``j % kbs``; the offset is
    undone into ``round * I * C + rank * I + within``.
    """
    kbs, c, i = layout.kernel_block_size, layout.dcp_size, layout.interleave
    block, local = divmod(local_index, kbs)
    rnd, within = divmod(local, i)
    return block * kbs * c + rnd * i * c + layout.rank * i + within
