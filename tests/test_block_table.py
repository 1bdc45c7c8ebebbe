"""Device block tables: expansion, the guard, the engine's spill, the tail, and gather."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from crossattn_sizing.base.errors import CapacityError, HarnessError
from crossattn_sizing.core.slot_layout import SlotLayout
from crossattn_sizing.impl import TorchImpl
from crossattn_sizing.impl.block_table import DeviceBlockTable, expand_block_ids
from crossattn_sizing.impl.runner import compute_slots
from reference.block_table import BlockTable as ReferenceBlockTable


def test_append_expands_kernel_blocks() -> None:
    table = DeviceBlockTable(2, 6, bpk=3)
    assert table.append(1, [5, 2]) == [15, 16, 17, 6, 7, 8]
    assert table.row(1) == [15, 16, 17, 6, 7, 8]
    assert table.table[1].tolist() == [15, 16, 17, 6, 7, 8]
    assert table.table.dtype == torch.int32
    assert expand_block_ids([5, 2], 3) == [15, 16, 17, 6, 7, 8]


def test_guarded_append_refuses_with_the_fields_a_report_needs() -> None:
    table = DeviceBlockTable(3, 4, bpk=2, tokens_per_entry=8, group=1)
    table.append(2, [9])
    with pytest.raises(CapacityError) as info:
        table.append(2, [3, 4])
    err = info.value
    fields = (err.group, err.row, err.needed, err.width, err.first_position, err.access)
    assert fields == (1, 2, 6, 4, 32, "append")
    assert isinstance(err, HarnessError) and isinstance(err, IndexError)
    assert "group 1 row 2 needs 6 entries but the row holds 4; token positions from 32" in str(err)
    assert table.row(2) == [18, 19]  # nothing of the refused append was written
    assert table.storage[10:].tolist() == [0] * (table.allocation - 10)


def test_unguarded_append_spills_into_the_next_row() -> None:
    table = DeviceBlockTable(3, 2, guarded=False)
    table.append(1, [7, 8])
    table.append(0, [1, 2, 3])  # one entry past row 0: overwrites row 1, column 0
    assert table.table.tolist() == [[1, 2], [3, 8], [0, 0]]
    assert table.row(0) == [1, 2, 3]
    assert table.row(1) == [3, 8]  # row 1 now names row 0's block


def test_unguarded_last_row_spills_into_the_tail() -> None:
    table = DeviceBlockTable(2, 2, guarded=False, tail=3)
    table.append(1, [4, 5, 6, 7])
    assert table.table.tolist() == [[0, 0], [4, 5]]
    assert table.storage[4:].tolist() == [6, 7, 0]
    assert table.row(1) == [4, 5, 6, 7]


@pytest.mark.parametrize("guarded", [False, True])
def test_past_the_modelled_allocation_is_refused_in_both_modes(guarded: bool) -> None:
    table = DeviceBlockTable(1, 2, guarded=guarded, tail=1)
    with pytest.raises(CapacityError) as info:
        table.append(0, [1, 2, 3, 4])
    assert info.value.access == ("append" if guarded else "allocation")
    with pytest.raises(CapacityError) as info:
        table.check_lookup(0, 3)
    assert info.value.access == ("lookup" if guarded else "allocation")


def test_clear_keeps_stale_ids_like_the_engine() -> None:
    table = DeviceBlockTable(1, 3)
    table.append(0, [4, 5])
    table.clear(0)
    assert table.row(0) == []
    assert table.table[0].tolist() == [4, 5, 0]
    table.append(0, [9])
    assert table.table[0].tolist() == [9, 5, 0]


def test_gather_copies_rows_in_batch_order_and_spills_like_the_engine() -> None:
    src = DeviceBlockTable(3, 2, guarded=False, tail=4)
    dst = DeviceBlockTable(3, 2, guarded=False, tail=4)
    src.append(2, [1, 2, 3])  # spills into the tail
    src.append(0, [7])
    src.gather([2, 0], into=dst)
    # Batch 0 copies 3 entries (one spills into batch row 1), then batch 1 overwrites it.
    assert dst.table.tolist()[:2] == [[1, 2], [7, 0]]
    assert dst.num_entries[:2] == [3, 1]
    assert dst.row(0) == [1, 2, 7]


class SpyImpl(TorchImpl):
    """Counts kernel launches."""

    def __init__(self) -> None:
        super().__init__("cpu")
        self.launches = 0

    def slot_mapping(self, **kwargs):  # type: ignore[no-untyped-def]
        self.launches += 1
        super().slot_mapping(**kwargs)


def test_guarded_lookup_is_refused_before_any_kernel_launch() -> None:
    impl = SpyImpl()
    table = DeviceBlockTable(2, 2, group=3)
    table.append(0, [5, 6])
    layout = SlotLayout(kernel_block_size=4, dcp_size=2, interleave=1, rank=0)
    with pytest.raises(CapacityError) as info:
        compute_slots(impl, table, [0], [range(17)], layout)  # position 16 needs column 2
    assert impl.launches == 0
    err = info.value
    fields = (err.group, err.row, err.needed, err.width, err.first_position, err.access)
    assert fields == (3, 0, 3, 2, 16, "lookup")
    compute_slots(impl, table, [0], [range(16)], layout)
    assert impl.launches == 1


def test_unguarded_lookup_reads_the_next_row() -> None:
    table = DeviceBlockTable(2, 1, guarded=False)
    table.append(0, [5])
    table.append(1, [9])
    slots = compute_slots(TorchImpl("cpu"), table, [0], [[0, 1, 4, 5]], SlotLayout(kernel_block_size=4))
    # Positions 4 and 5 have no column in row 0: the engine reads row 1's block 9.
    assert slots.tolist() == [20, 21, 36, 37]


@given(
    width=st.integers(0, 6),
    bpk=st.integers(1, 3),
    appends=st.lists(st.tuples(st.integers(0, 2), st.lists(st.integers(1, 50), max_size=4)), max_size=8),
)
def test_guarded_table_matches_the_reference_or_refuses(
    width: int, bpk: int, appends: list[tuple[int, list[int]]]
) -> None:
    """Guarded: an append is stored exactly as the reference stores it, or refused when it overflows."""
    table = DeviceBlockTable(3, width * bpk, bpk=bpk)
    ref = ReferenceBlockTable(3, width, bpk)
    for row, ids in appends:
        if len(ref.row(row)) + len(ids) * bpk > ref.capacity:
            with pytest.raises(CapacityError):  # the reference would overflow: refused, nothing written
                table.append(row, ids)
        else:
            assert not ref.append(row, ids).overflowed
            table.append(row, ids)
        assert table.row(row) == ref.row(row)
