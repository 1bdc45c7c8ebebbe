"""BlockTable and expand: kernel-block expansion, and overflow reported as data."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reference.block_table import BlockTable, expand
from reference.pool import BlockPool

from .strategies import FAST, cdiv, seeds


def test_expand_with_four_kernel_blocks_per_manager_block() -> None:
    assert expand([3, 1], 4) == [12, 13, 14, 15, 4, 5, 6, 7]
    assert expand([3, 1], 1) == [3, 1]
    assert expand([], 4) == []


def test_append_with_bpk_4_stores_two_manager_blocks_and_reports_the_third() -> None:
    table = BlockTable(num_rows=2, width=2, bpk=4)
    assert table.capacity == 8
    result = table.append(0, [3, 1, 2])
    assert result.stored == [12, 13, 14, 15, 4, 5, 6, 7]
    assert result.overflow == [8, 9, 10, 11]
    assert result.overflowed
    assert table.row(0) == [12, 13, 14, 15, 4, 5, 6, 7]
    assert table.row(1) == [], "overflow must not spill into the next row"


def test_a_row_one_column_short_reports_the_last_block() -> None:
    # e = 13 tokens with bs = 4 needs cdiv(13, 4) = 4 blocks; the row has 3 columns.
    table = BlockTable(num_rows=2, width=3)
    result = table.append(0, [7, 3, 9, 5])
    assert (result.stored, result.overflow) == ([7, 3, 9], [5])
    assert table.row(1) == []


def test_nemotron_parse_page_under_the_pre_fix_width() -> None:
    # Spec "known bug shape": e = 3329, bs = 16, M = 2048 gives W = 128 against 209 needed.
    width, needed = cdiv(2048, 16), cdiv(3329, 16)
    assert (width, needed) == (128, 209)
    table = BlockTable(num_rows=2, width=width)
    ids = BlockPool(1024).allocate(needed)
    result = table.append(0, ids)
    assert result.stored == ids[:128]
    assert result.overflow == ids[128:]
    assert len(result.overflow) == 81


def test_clear_empties_a_row() -> None:
    table = BlockTable(1, 2)
    table.append(0, [4, 2])
    table.clear(0)
    assert table.row(0) == []
    assert table.append(0, [1]).stored == [1]


@FAST
@given(
    width=st.integers(0, 6),
    bpk=st.sampled_from([1, 2, 4]),
    chunks=st.lists(st.integers(0, 4), max_size=4),
    seed=seeds,
)
def test_append_keeps_every_entry_exactly_once_and_never_exceeds_capacity(
    width: int, bpk: int, chunks: list[int], seed: int
) -> None:
    pool = BlockPool(64, seed)
    table = BlockTable(num_rows=3, width=width, bpk=bpk)
    all_ids: list[int] = []
    stored: list[int] = []
    overflow: list[int] = []
    for n in chunks:
        ids = pool.allocate(n)
        all_ids += ids
        result = table.append(1, ids)
        assert result.stored + result.overflow == expand(ids, bpk)
        stored += result.stored
        overflow += result.overflow
    assert stored + overflow == expand(all_ids, bpk)
    assert table.row(1) == stored
    assert len(stored) == min(len(all_ids) * bpk, table.capacity)
    assert table.row(0) == [] and table.row(2) == []
    # Invariant 3: entry j*bpk + k is id_j*bpk + k.
    for index, entry in enumerate(stored):
        j, k = divmod(index, bpk)
        assert entry == all_ids[j] * bpk + k


@FAST
@given(
    kbs=st.sampled_from([1, 2, 4]),
    bpk=st.sampled_from([1, 2, 4]),
    num_manager_blocks=st.integers(1, 5),
    seed=seeds,
)
def test_kernel_and_manager_slots_name_the_same_cell(
    kbs: int, bpk: int, num_manager_blocks: int, seed: int
) -> None:
    bs = kbs * bpk
    manager_row = BlockPool(16, seed).allocate(num_manager_blocks)
    kernel_row = expand(manager_row, bpk)
    for p in range(num_manager_blocks * bs):
        manager_slot = manager_row[p // bs] * bs + p % bs
        kernel_slot = kernel_row[p // kbs] * kbs + p % kbs
        assert manager_slot == kernel_slot
