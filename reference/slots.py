"""Slot mapping of the reference model: which cache cell each token position uses.

A slot is a flat cell index ``block * kbs + offset`` into a paged cache whose blocks hold
``kbs`` (kernel block size) tokens. ``PAD_SLOT_ID`` (-1) marks "write nothing": a token
another DCP rank owns, or padding past the step's tokens.

Decode context parallelism (DCP) with ``C`` ranks shards a sequence over ranks. A row's
block ``bi`` then stands for a *virtual block* of ``kbs*C`` positions, dealt out to the
ranks in runs of ``I`` (the interleave size); each rank keeps its share of the virtual
block, ``kbs`` tokens, in its own copy of block ``row[bi]``.

The engine loads ``row[bi]`` without a bounds check, so a too-narrow row reads another
request's ids. The oracle instead raises ``ColumnOutOfRange``: it never reads garbage,
and the error carries what a report needs (position, column, width).
"""

from __future__ import annotations

from collections.abc import Sequence

from .checks import at_least

PAD_SLOT_ID = -1
"""Slot value meaning "no cell": not owned by this rank, or padding."""


class ColumnOutOfRange(IndexError):
    """A position's block column lies past the end of the request's row."""

    def __init__(self, position: int, column: int, width: int) -> None:
        super().__init__(
            f"position {position} needs block column {column} but the row has only {width} entries"
        )
        self.position = position
        self.column = column
        self.width = width


class InvalidLayout(ValueError):
    """Kernel block size, DCP size, interleave and rank do not form a valid layout."""


def check_layout(kernel_block_size: int, dcp_size: int, interleave: int, rank: int) -> None:
    """Reject layouts for which the DCP formulas stop being a partition.

    With ``C > 1`` the interleave must divide the kernel block size: otherwise a rank's
    local offset inside a virtual block can reach ``kbs`` and its slot would fall into
    a block the row does not name. The engine requires ``bs % I == 0`` of the manager
    block size; the oracle asks it of the block size the slots are computed with.
    """
    at_least("kernel_block_size", kernel_block_size, 1, InvalidLayout)
    at_least("dcp_size", dcp_size, 1, InvalidLayout)
    at_least("interleave", interleave, 1, InvalidLayout)
    if not 0 <= rank < dcp_size:
        raise InvalidLayout(f"rank {rank} is outside [0, {dcp_size})")
    if dcp_size > 1 and kernel_block_size % interleave != 0:
        raise InvalidLayout(
            f"interleave {interleave} does not divide kernel block size {kernel_block_size} (C={dcp_size})"
        )


def owner_rank(position: int, kernel_block_size: int, dcp_size: int, interleave: int) -> int:
    """The DCP rank whose cache holds ``position``: ``(off // I) % C``, ``off = p % (kbs*C)``."""
    check_layout(kernel_block_size, dcp_size, interleave, 0)
    at_least("position", position, 0)
    offset = position % (kernel_block_size * dcp_size)
    return (offset // interleave) % dcp_size


def local_offset(offset: int, dcp_size: int, interleave: int) -> int:
    """Offset inside the rank's block of a virtual-block offset the rank owns.

    Whole rounds of ``I*C`` positions give each rank ``I`` tokens; within a round the
    rank's run of ``I`` keeps its order: ``(off // (I*C)) * I + off % I``.
    """
    return (offset // (interleave * dcp_size)) * interleave + offset % interleave


def local_length(seq_len: int, dcp_size: int, interleave: int, rank: int) -> int:
    """How many of the first ``seq_len`` positions rank ``rank`` holds.

    ``(s // (C*I)) * I + min(max(s % (C*I) - r*I, 0), I)``: ``I`` per full round, plus
    the part of the last, partial round that reaches this rank's run.
    """
    at_least("seq_len", seq_len, 0)
    if dcp_size < 1 or interleave < 1 or not 0 <= rank < dcp_size:
        raise InvalidLayout(f"bad layout: dcp_size={dcp_size}, interleave={interleave}, rank={rank}")
    round_len = dcp_size * interleave
    full_rounds, rest = divmod(seq_len, round_len)
    return full_rounds * interleave + min(max(rest - rank * interleave, 0), interleave)


def global_position(
    local_index: int, kernel_block_size: int, dcp_size: int, interleave: int, rank: int
) -> int:
    """The sequence position of a rank's ``local_index``-th token; inverse of the layout.

    A rank's tokens, in position order, fill its blocks densely: local token ``j`` lives
    in virtual block ``j // kbs`` at local offset ``j % kbs``. The read side of a paged
    attention kernel needs this to know which position (for causal masking) a key has.
    """
    check_layout(kernel_block_size, dcp_size, interleave, rank)
    at_least("local_index", local_index, 0)
    virtual_block, local = divmod(local_index, kernel_block_size)
    round_index, within_run = divmod(local, interleave)
    offset = round_index * interleave * dcp_size + rank * interleave + within_run
    return virtual_block * kernel_block_size * dcp_size + offset


def self_attention_slots(
    row: Sequence[int],
    positions: Sequence[int],
    kernel_block_size: int,
    dcp_size: int,
    interleave: int,
    rank: int,
    pad_to: int,
) -> list[int]:
    """Slots of ``positions`` on ``rank``, padded with -1 to ``pad_to`` entries.

    For each ``p``: ``bi = p // (kbs*C)``, ``off = p % (kbs*C)``, ``bn = row[bi]``; with
    ``C == 1`` the slot is ``bn*kbs + off``; with ``C > 1`` it is ``bn*kbs + local`` on
    the owning rank and -1 elsewhere. Raises ``ColumnOutOfRange`` if ``bi >= len(row)``.
    """
    check_layout(kernel_block_size, dcp_size, interleave, rank)
    if pad_to < len(positions):
        raise ValueError(f"pad_to ({pad_to}) is shorter than the {len(positions)} positions")
    virtual_block_size = kernel_block_size * dcp_size
    slots: list[int] = []
    for position in positions:
        at_least("position", position, 0)
        column, offset = divmod(position, virtual_block_size)
        if column >= len(row):
            raise ColumnOutOfRange(position=position, column=column, width=len(row))
        block = row[column]
        if dcp_size == 1:
            slots.append(block * kernel_block_size + offset)
        elif (offset // interleave) % dcp_size == rank:
            slots.append(block * kernel_block_size + local_offset(offset, dcp_size, interleave))
        else:
            slots.append(PAD_SLOT_ID)
    slots.extend([PAD_SLOT_ID] * (pad_to - len(positions)))
    return slots


def cross_attention_slots(
    row: Sequence[int], encoder_len: int, kernel_block_size: int, pad_to: int
) -> list[int]:
    """Engine-faithful cross-attention slots: ``row[p // kbs]*kbs + p % kbs`` for ``p < e``.

    This path ignores DCP, as the engine does: every position gets a slot on every rank,
    and a row whose width was divided by ``C`` runs out of columns (``ColumnOutOfRange``).
    It is the ``C == 1`` self-attention mapping over ``range(encoder_len)``. The
    DCP-consistent variant, under which a width of ``cdiv(e, bs*C)`` columns is
    enough, is not what the engine does: it is ``self_attention_slots`` over
    ``range(encoder_len)`` with the group's ``C`` and ``I``, each rank keeping its share.
    """
    return self_attention_slots(row, range(encoder_len), kernel_block_size, 1, 1, 0, pad_to)


def local_slots(row: Sequence[int], local_len: int, kernel_block_size: int) -> list[int]:
    """Slots a paged attention kernel reads on one rank: local token ``j`` at ``row[j//kbs]*kbs + j%kbs``.

    The read side knows nothing of DCP: each rank's tokens fill its copy of the row's
    blocks densely, in position order. For ``C == 1`` the local tokens are the
    positions themselves. Raises ``ColumnOutOfRange`` when the row is too short.
    """
    return self_attention_slots(row, range(local_len), kernel_block_size, 1, 1, 0, local_len)
