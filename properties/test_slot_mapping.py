"""Slot-mapping property: the implementation's slots equal the reference's, exactly.

For every group (self-attention, the engine's cross path, the sharded cross
variant), every DCP rank and every token of a step, padding included. Block
ids come from the reference's pool (unique, non-monotonic), so a kernel that
assumes sorted or contiguous ids fails here. Run against ``--impl``.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from crossattn_sizing.core.slot_layout import SlotLayout
from crossattn_sizing.impl import Impl
from crossattn_sizing.impl.block_table import DeviceBlockTable
from crossattn_sizing.impl.runner import compute_slots

from .failures import assert_equal, harness_options
from .impl_assertions import assert_slots_equal
from .impl_strategies import SlotCase, SlotGroup, SlotRequest, seeds, slot_cases
from .oracle import BlockPool
from .oracle import BlockTable as ReferenceBlockTable
from .oracle import slots as ref_slots


def _layout(case: SlotCase, group: SlotGroup, rank: int) -> SlotLayout:
    if group.kind == "cross":  # the engine's path: DCP ignored on every rank
        return SlotLayout(group.kbs)
    return SlotLayout(group.kbs, case.dcp_size, case.interleave, rank)


def _expected(case: SlotCase, group: SlotGroup, request: SlotRequest, row: list[int], rank: int) -> list[int]:
    positions = case.positions(group, request)
    if group.kind == "self":
        return ref_slots.self_attention_slots(
            row, positions, group.kbs, case.dcp_size, case.interleave, rank, len(positions)
        )
    if group.kind == "cross":
        return ref_slots.cross_attention_slots(row, request.encoder_len, group.kbs, request.encoder_len)
    # The DCP-consistent cross mapping: each rank keeps its share of the encoder tokens.
    encoder = range(request.encoder_len)
    return ref_slots.self_attention_slots(
        row, encoder, group.kbs, case.dcp_size, case.interleave, rank, request.encoder_len
    )


def check_slot_mapping(data: st.DataObject, impl: Impl) -> None:
    """The body of the property, shared with the meta-tests (tests/meta/test_meta_impl.py)."""
    case = data.draw(slot_cases(), label="case")
    pool_seed = data.draw(seeds(), label="pool_seed")
    requests = case.requests
    rows = [r.row for r in requests]
    options = harness_options(impl)
    for gi, group in enumerate(case.groups):
        blocks = [case.blocks(group, r) for r in requests]
        pool = BlockPool(1 + sum(blocks) + 2, seed=(pool_seed + gi) % 2**32)
        table = DeviceBlockTable(
            case.num_rows,
            group.width * group.bpk,
            bpk=group.bpk,
            tokens_per_entry=group.kbs * case.group_dcp(group),
            group=gi,
            device=impl.device,
        )
        ref = ReferenceBlockTable(case.num_rows, group.width, group.bpk)
        for request, n in zip(requests, blocks, strict=True):
            ids = pool.allocate(n)
            table.append(request.row, ids)
            ref.append(request.row, ids)
        header = [
            f"slot mapping of {impl.name} on {impl.device} differs from the reference",
            f"  group {gi}: {group.kind}, bs={group.block_size}, kbs={group.kbs}, width {group.width} "
            f"blocks ({group.width * group.bpk} entries); DCP {case.dcp_size} x interleave {case.interleave}",
        ]
        for request in requests:  # spec invariant 3: entry j*bpk+k is id_j*bpk+k
            assert_equal(f"row {request.row}'s entries", table.row(request.row), ref.row(request.row), header,
                         options)
        positions = [case.positions(group, r) for r in requests]
        num_tokens = sum(len(p) for p in positions)
        pad_to = num_tokens + case.pad_extra
        tokens = [(i, r.row, p) for i, r in enumerate(requests) for p in positions[i]]
        # Every rank, also for the engine's cross path, which must give each rank the same slots.
        for rank in range(case.dcp_size):
            got = compute_slots(impl, table, rows, positions, _layout(case, group, rank), pad_to).tolist()
            expected = [s for r in requests for s in _expected(case, group, r, ref.row(r.row), rank)]
            expected += [ref_slots.PAD_SLOT_ID] * case.pad_extra
            assert_slots_equal(got, expected, tokens, [*header, f"  rank {rank}"], options)


@given(data=st.data())
def test_slot_mapping_matches_reference(data: st.DataObject, impl: Impl) -> None:
    """Slots equal the reference's for every group, rank and token, including padding."""
    check_slot_mapping(data, impl)
