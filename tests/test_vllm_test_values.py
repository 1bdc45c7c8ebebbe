"""vLLM's own hand-written slot mappings and block-table contents, on the torch implementation and reference.

The values are in tests/vllm_test_values.py (facts from vLLM's unit tests);
the releases' own ``BlockTables`` reproduce them in tests/test_engine_real.py.
The padding past the step's tokens (-1) is checked here as vLLM's tests check it.
"""

from __future__ import annotations

import pytest
import torch

from crossattn_sizing.core.slot_layout import SlotLayout
from crossattn_sizing.impl import Impl, TorchImpl
from crossattn_sizing.impl.block_table import DeviceBlockTable
from crossattn_sizing.impl.step import SlotStep
from reference.block_table import BlockTable, expand
from reference.slots import PAD_SLOT_ID, self_attention_slots
from tests.broken_impls import BROKEN_SLOT_MAPPINGS
from tests.vllm_test_values import SLOT_CASES, TABLE_CASES, SlotCase, TableCase

PAD = 5
"""Padding entries after the step's tokens, which must read -1."""


def impl_slots(impl: Impl, case: SlotCase) -> list[int]:
    """The implementation's slots for the case, through the harness's table (padding included)."""
    table = DeviceBlockTable(len(case.rows), case.width * case.bpk, bpk=case.bpk)
    for row, ids in enumerate(case.rows):
        table.append(row, list(ids))
    lens = [len(p) for p in case.positions]
    qsl = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    positions = torch.tensor([p for ps in case.positions for p in ps], dtype=torch.int64)
    size, rank, interleave = case.dcp
    step = SlotStep(
        table=table.storage, row_stride=table.width, req_rows=torch.arange(len(lens), dtype=torch.int32),
        query_start_loc=qsl, positions=positions,
        layout=SlotLayout(case.kernel_block_size, size, interleave, rank),
    )  # fmt: skip
    out = torch.full((positions.numel() + PAD,), 12345, dtype=torch.int64)
    impl.slot_mapping(step=step, out=out)
    return out.tolist()


def reference_slots(case: SlotCase) -> list[int]:
    size, rank, interleave = case.dcp
    slots: list[int] = []
    for ids, positions in zip(case.rows, case.positions, strict=True):
        row = expand(list(ids), case.bpk)
        slots += self_attention_slots(row, list(positions), case.kernel_block_size, size, interleave, rank,
                                      len(positions))  # fmt: skip
    return slots + [PAD_SLOT_ID] * PAD


def checked(case: SlotCase, slots: list[int]) -> list[int]:
    """The slots the case states, and the padding after the step's tokens."""
    tokens = sum(len(p) for p in case.positions)
    return slots[case.first_checked : case.first_checked + len(case.expected)] + slots[tokens:]


@pytest.mark.parametrize("case", SLOT_CASES, ids=[c.name for c in SLOT_CASES])
def test_torch_and_reference_give_vllms_slots(case: SlotCase) -> None:
    want = [*case.expected, *[PAD_SLOT_ID] * PAD]
    assert checked(case, impl_slots(TorchImpl("cpu"), case)) == want
    assert checked(case, reference_slots(case)) == want


@pytest.mark.parametrize("case", TABLE_CASES, ids=[c.name for c in TABLE_CASES])
def test_torch_and_reference_tables_hold_vllms_rows(case: TableCase) -> None:
    device = [DeviceBlockTable(case.num_rows, case.width) for _ in case.block_sizes]
    oracle = [BlockTable(case.num_rows, case.width) for _ in case.block_sizes]
    for row, per_group in case.appends:
        for g, ids in enumerate(per_group):
            device[g].append(row, list(ids))
            assert not oracle[g].append(row, list(ids)).overflowed
    for g, rows in enumerate(case.rows):
        for r, ids in enumerate(rows):
            assert device[g].row(r) == list(ids) and oracle[g].row(r) == list(ids), (g, r)


CAUGHT_BY_THESE_VALUES = sorted(set(BROKEN_SLOT_MAPPINGS) - {"broken-interleave-ownership"})
"""vLLM's hand-written DCP case has interleave 1, where ignoring the interleave changes nothing: that
bug is left to the slot-mapping property (tests/meta), which draws interleaves."""


@pytest.mark.parametrize("name", CAUGHT_BY_THESE_VALUES)
def test_a_broken_slot_mapping_misses_some_of_vllms_values(name: str) -> None:
    """Meta-test: the project's broken slot mappings fail at least one of the stated values."""
    broken = BROKEN_SLOT_MAPPINGS[name]("cpu")
    wrong = [c.name for c in SLOT_CASES
             if checked(c, impl_slots(broken, c)) != [*c.expected, *[PAD_SLOT_ID] * PAD]]  # fmt: skip
    assert wrong, f"{name} reproduces every value vLLM's tests state"
