"""Slot mapping, DCP ownership and local lengths: hand-computed anchors and invariants."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference.pool import BlockPool
from reference.slots import (
    PAD_SLOT_ID,
    ColumnOutOfRange,
    InvalidLayout,
    cross_attention_slots,
    global_position,
    local_length,
    local_slots,
    owner_rank,
    self_attention_slots,
)

from .strategies import FAST, Layout, cdiv, layouts, seeds

NUM_BLOCKS = 64

# ----------------------------------------------------------------------------- anchors


def test_single_rank_slots_follow_the_row_and_pad() -> None:
    # kbs = 4, row [7, 3, 9]: positions 0-3 in block 7, 4-7 in block 3, 8-9 in block 9.
    slots = self_attention_slots([7, 3, 9], range(10), 4, 1, 1, 0, pad_to=12)
    assert slots == [28, 29, 30, 31, 12, 13, 14, 15, 36, 37, -1, -1]
    assert cross_attention_slots([7, 3, 9], 10, 4, pad_to=12) == slots


def test_a_row_one_column_short_raises_column_out_of_range() -> None:
    # e = 13, kbs = 4 needs 4 columns; position 12 asks for column 3 of a 3-wide row.
    with pytest.raises(ColumnOutOfRange) as info:
        cross_attention_slots([7, 3, 9], 13, 4, pad_to=13)
    assert (info.value.position, info.value.column, info.value.width) == (12, 3, 3)
    assert isinstance(info.value, IndexError)


def test_nemotron_parse_summary_token_has_no_column() -> None:
    # M = 3328, bs = 16: W = 208 columns; the 3329th encoder token (the summary) needs column 208.
    row = list(range(1, 209))
    with pytest.raises(ColumnOutOfRange) as info:
        cross_attention_slots(row, 3329, 16, pad_to=3329)
    assert (info.value.position, info.value.column, info.value.width) == (3328, 208, 208)
    assert cross_attention_slots(row, 3328, 16, pad_to=3328)[-1] == 208 * 16 + 15


def test_dcp_two_ranks_interleave_one() -> None:
    # kbs = 4, C = 2, I = 1: virtual blocks of 8; rank 0 owns even positions, rank 1 odd.
    row = [5, 2]
    rank0 = self_attention_slots(row, range(16), 4, 2, 1, 0, pad_to=16)
    rank1 = self_attention_slots(row, range(16), 4, 2, 1, 1, pad_to=16)
    assert rank0 == [20, -1, 21, -1, 22, -1, 23, -1, 8, -1, 9, -1, 10, -1, 11, -1]
    assert rank1 == [-1, 20, -1, 21, -1, 22, -1, 23, -1, 8, -1, 9, -1, 10, -1, 11]
    assert [local_length(11, 2, 1, r) for r in (0, 1)] == [6, 5]
    assert [owner_rank(p, 4, 2, 1) for p in range(4)] == [0, 1, 0, 1]


def test_dcp_four_ranks_interleave_equal_to_block_size() -> None:
    # kbs = I = 4, C = 4: virtual blocks of 16; rank r owns positions 4r..4r+3 of each.
    row = [6, 1]
    rank2 = self_attention_slots(row, range(32), 4, 4, 4, 2, pad_to=32)
    owned = {p: s for p, s in enumerate(rank2) if s != PAD_SLOT_ID}
    assert owned == {8: 24, 9: 25, 10: 26, 11: 27, 24: 4, 25: 5, 26: 6, 27: 7}
    rank0 = self_attention_slots(row, range(32), 4, 4, 4, 0, pad_to=32)
    assert [s for s in rank0 if s != PAD_SLOT_ID] == [24, 25, 26, 27, 4, 5, 6, 7]
    assert [local_length(21, 4, 4, r) for r in range(4)] == [8, 5, 4, 4]
    assert global_position(5, 4, 4, 4, 2) == 25


def test_sharded_cross_slots_fit_the_divided_width_where_the_engine_path_does_not() -> None:
    # e = 5, kbs = 2, C = 2: W = cdiv(5, 2*2) = 2 columns.
    row = [3, 1]
    # Sharded: each rank keeps its share of the encoder tokens, as self-attention does.
    assert self_attention_slots(row, range(5), 2, 2, 1, 0, pad_to=6) == [6, -1, 7, -1, 2, -1]
    assert self_attention_slots(row, range(5), 2, 2, 1, 1, pad_to=6) == [-1, 6, -1, 7, -1, -1]
    with pytest.raises(ColumnOutOfRange):
        cross_attention_slots(row, 5, 2, pad_to=5)


def test_invalid_layouts_and_arguments_are_refused() -> None:
    with pytest.raises(InvalidLayout):
        self_attention_slots([1], [0], 4, 2, 3, 0, pad_to=1)  # I does not divide kbs
    with pytest.raises(InvalidLayout):
        self_attention_slots([1], [0], 4, 2, 1, 2, pad_to=1)  # rank outside [0, C)
    with pytest.raises(ValueError):
        self_attention_slots([1], [0, 1], 4, 1, 1, 0, pad_to=1)  # pad_to too short


# -------------------------------------------------------------------------- properties


def _row_for(layout: Layout, seq_len: int, seed: int) -> list[int]:
    return BlockPool(NUM_BLOCKS, seed).allocate(cdiv(seq_len, layout.virtual_block_size))


def _slots(layout: Layout, row: list[int], seq_len: int, rank: int, pad_to: int) -> list[int]:
    """Rank ``rank``'s slots of positions ``0..seq_len-1`` under ``layout``: what each property writes."""
    kbs, dcp_size, interleave = layout.kernel_block_size, layout.dcp_size, layout.interleave
    return self_attention_slots(row, range(seq_len), kbs, dcp_size, interleave, rank, pad_to=pad_to)


@FAST
@given(layout=layouts(), seq_len=st.integers(0, 40), extra=st.integers(0, 3), seed=seeds)
def test_slots_are_injective_in_range_and_inside_the_rows_blocks(
    layout: Layout, seq_len: int, extra: int, seed: int
) -> None:
    kbs, dcp_size, interleave = layout.kernel_block_size, layout.dcp_size, layout.interleave
    row = _row_for(layout, seq_len, seed)
    owners = [0] * seq_len
    for rank in range(dcp_size):
        slots = _slots(layout, row, seq_len, rank, pad_to=seq_len + extra)
        assert slots[seq_len:] == [PAD_SLOT_ID] * extra
        live = [s for s in slots[:seq_len] if s != PAD_SLOT_ID]
        assert len(set(live)) == len(live), "two positions share a cell on one rank"
        assert all(0 <= s < NUM_BLOCKS * kbs for s in live)
        for p, slot in enumerate(slots[:seq_len]):
            if slot != PAD_SLOT_ID:
                assert slot // kbs == row[p // layout.virtual_block_size]
                assert owner_rank(p, kbs, dcp_size, interleave) == rank
                owners[p] += 1
        assert len(live) == local_length(seq_len, dcp_size, interleave, rank)
    assert owners == [1] * seq_len, "every position is owned by exactly one rank"


@FAST
@given(layout=layouts())
def test_local_offsets_are_a_bijection_onto_the_block_per_rank(layout: Layout) -> None:
    kbs = layout.kernel_block_size
    for rank in range(layout.dcp_size):
        slots = _slots(layout, [1], layout.virtual_block_size, rank, pad_to=layout.virtual_block_size)
        offsets = [s - kbs for s in slots if s != PAD_SLOT_ID]
        assert sorted(offsets) == list(range(kbs))
        assert offsets == sorted(offsets), "local order follows position order"


@FAST
@given(
    seq_len=st.integers(0, 100),
    dcp_size=st.integers(1, 5),
    interleave=st.integers(1, 8),
)
def test_local_lengths_count_owned_positions_and_sum_to_the_length(
    seq_len: int, dcp_size: int, interleave: int
) -> None:
    lengths = [local_length(seq_len, dcp_size, interleave, r) for r in range(dcp_size)]
    assert sum(lengths) == seq_len
    # Ownership by (p // I) % C, which is what the slot formula gives when I divides kbs.
    counted = [sum(1 for p in range(seq_len) if (p // interleave) % dcp_size == r) for r in range(dcp_size)]
    assert lengths == counted


@FAST
@given(layout=layouts(), seq_len=st.integers(0, 40), seed=seeds)
def test_reads_through_the_row_find_exactly_the_written_cells(
    layout: Layout, seq_len: int, seed: int
) -> None:
    kbs, dcp_size, interleave = layout.kernel_block_size, layout.dcp_size, layout.interleave
    row = _row_for(layout, seq_len, seed)
    for rank in range(dcp_size):
        write = _slots(layout, row, seq_len, rank, pad_to=seq_len)
        owned = [p for p in range(seq_len) if write[p] != PAD_SLOT_ID]
        local_len = local_length(seq_len, dcp_size, interleave, rank)
        assert local_slots(row, local_len, kbs) == [write[p] for p in owned]
        assert [global_position(j, kbs, dcp_size, interleave, rank) for j in range(local_len)] == owned


@FAST
@given(layout=layouts(), seq_len=st.integers(1, 40), short_by=st.integers(1, 3), seed=seeds)
def test_a_short_row_raises_at_the_first_missing_column(
    layout: Layout, seq_len: int, short_by: int, seed: int
) -> None:
    full = _row_for(layout, seq_len, seed)
    width = max(len(full) - short_by, 0)
    with pytest.raises(ColumnOutOfRange) as info:
        _slots(layout, full[:width], seq_len, 0, pad_to=seq_len)
    assert info.value.column == width == info.value.width
    assert info.value.position == width * layout.virtual_block_size
