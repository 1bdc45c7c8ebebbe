"""Exact values of the helpers and diagnoses the properties do not reach.

Written to kill mutants that survived the property suite (reports/mutation.md);
each test pins behaviour a mutant changed and no property looked at: helpers
the properties do not call (``column_of``, ``expand_ids``, the DCP inverse
functions of slot mapping, reached otherwise only through the slow attention
property), validation branches, and the text of diagnoses. Where possible the
expected values come from the pure-Python oracle in ``reference/``, which
shares no code with ``src/``, checked exhaustively over a small domain.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from crossattn_sizing.core import admission
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from reference import slots as ref_slots

# ---------------------------------------------------------------- slot mapping: DCP layouts


def layouts() -> list[tuple[int, int, int, int]]:
    """Every ``(kbs, C, I, rank)`` with kbs <= 8, C <= 4 and I dividing kbs (I = 1 when C = 1)."""
    out = []
    for kbs, c in itertools.product(range(1, 9), range(1, 5)):
        interleaves = [1] if c == 1 else [i for i in range(1, kbs + 1) if kbs % i == 0]
        out += [(kbs, c, i, r) for i in interleaves for r in range(c)]
    return out


def test_local_length_matches_the_oracle_and_lengths_sum_to_the_sequence() -> None:
    from crossattn_sizing.core.slot_layout import SlotLayout, local_length

    for kbs, c, i, r in layouts():
        layout = SlotLayout(kbs, c, i, r)
        for s in range(3 * kbs * c + 2):
            assert local_length(s, layout) == ref_slots.local_length(s, c, i, r), (kbs, c, i, r, s)
    for kbs, c, i, _ in layouts():
        for s in range(2 * kbs * c + 2):
            assert sum(local_length(s, SlotLayout(kbs, c, i, r)) for r in range(c)) == s


def test_global_positions_invert_the_layout_like_the_oracle() -> None:
    import torch

    from crossattn_sizing.core.slot_layout import SlotLayout, global_position
    from crossattn_sizing.impl.slot_mapping import global_positions

    for kbs, c, i, r in layouts():
        layout = SlotLayout(kbs, c, i, r)
        n = 2 * kbs + 3
        expected = [ref_slots.global_position(j, kbs, c, i, r) for j in range(n)]
        assert [global_position(j, layout) for j in range(n)] == expected, (kbs, c, i, r)
        tensor = global_positions(n, layout, "cpu")
        assert tensor.dtype == torch.int64
        assert tensor.tolist() == expected, (kbs, c, i, r)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ((0, 1, 1, 0), "invalid slot layout"),
        ((4, 0, 1, 0), "invalid slot layout"),
        ((4, 1, 0, 0), "invalid slot layout"),
        ((4, 2, 0, 0), "invalid slot layout"),
        ((4, 2, 1, 2), r"rank 2 outside \[0, 2\)"),
        ((4, 2, 1, -1), r"rank -1 outside \[0, 2\)"),
        ((4, 2, 3, 0), "interleave 3 must divide kbs 4"),
        ((6, 3, 4, 1), "interleave 4 must divide kbs 6"),
    ],
)
def test_invalid_slot_layouts_are_refused_with_the_reason(fields: tuple[int, ...], message: str) -> None:
    from crossattn_sizing.core.slot_layout import SlotLayout

    with pytest.raises(ValueError, match=message):
        SlotLayout(*fields)


def test_without_dcp_any_interleave_is_accepted() -> None:
    # The engine ignores I when C == 1, so the layout must not refuse it.
    from crossattn_sizing.core.slot_layout import SlotLayout

    assert SlotLayout(4, 1, 3).virtual_block_size == 4
    assert SlotLayout(4, 2, 2, 1).virtual_block_size == 8


def test_slot_mapping_runs_on_the_meta_device_without_data_dependent_sizes() -> None:
    """Nothing in the slot path may read tensor values on the host (CUDA graphs, no sync).

    The meta device has no values, so any host read or data-dependent size raises
    there; results must also stay on the caller's device. This is how the
    ``output_size`` and ``device`` arguments are checked without a GPU.
    """
    import torch

    from crossattn_sizing.core.slot_layout import SlotLayout
    from crossattn_sizing.impl.slot_mapping import global_positions, token_requests, torch_slot_mapping
    from crossattn_sizing.impl.step import SlotStep

    meta = torch.device("meta")
    query_start_loc = torch.tensor([0, 2, 5], dtype=torch.int32, device=meta)
    batch = token_requests(query_start_loc, 5)
    assert (batch.device, batch.dtype, tuple(batch.shape)) == (meta, torch.int64, (5,))
    positions = global_positions(7, SlotLayout(4, 2, 2, 1), meta)
    assert (positions.device, positions.dtype, tuple(positions.shape)) == (meta, torch.int64, (7,))
    table = torch.zeros(20, dtype=torch.int32, device=meta)
    rows = torch.tensor([0, 1], dtype=torch.int32, device=meta)
    tokens = torch.zeros(5, dtype=torch.int64, device=meta)
    for layout in (SlotLayout(4), SlotLayout(4, 2, 2, 1)):
        out = torch.empty(8, dtype=torch.int64, device=meta)
        torch_slot_mapping(SlotStep(table, 10, rows, query_start_loc, tokens, layout), out)


def test_token_requests_values() -> None:
    import torch

    from crossattn_sizing.impl.slot_mapping import token_requests

    got = token_requests(torch.tensor([0, 2, 2, 5], dtype=torch.int32), 5)
    assert got.dtype == torch.int64
    assert got.tolist() == [0, 0, 2, 2, 2]


# ---------------------------------------------------------------- admission helpers


def dcp_config() -> RunnerConfig:
    return RunnerConfig(
        max_model_len=100,
        max_num_batched_tokens=300,
        max_num_encoder_input_tokens=200,
        dcp_size=2,
        dcp_interleave=2,
        groups=(KVCacheGroup(GroupKind.CROSS, 16, 4), KVCacheGroup(GroupKind.FULL, 16, dcp_sharded=False)),
    )


def test_column_of_uses_kernel_blocks_on_every_rank() -> None:
    config = dcp_config()
    cross, replicated = config.groups
    # cross: one entry spans kbs * C = 8 positions; the replicated group's entry spans 16.
    assert [admission.column_of(config, cross, p) for p in (0, 7, 8, 15, 16, 199)] == [0, 0, 1, 1, 2, 24]
    assert [admission.column_of(config, replicated, p) for p in (0, 15, 16, 99)] == [0, 0, 1, 6]


def test_expand_ids_gives_bpk_consecutive_kernel_blocks_per_manager_block() -> None:
    group = KVCacheGroup(GroupKind.CROSS, 16, 4)
    assert admission.expand_ids(group, [3, 1]) == [12, 13, 14, 15, 4, 5, 6, 7]
    assert admission.expand_ids(KVCacheGroup(GroupKind.CROSS, 16), [3, 1]) == [3, 1]
    assert admission.expand_ids(group, []) == []


def test_entries_received_are_whole_kernel_blocks() -> None:
    config = dcp_config()
    cross = config.groups[0]
    # cdiv(33, 16 * 2) = 2 manager blocks, 4 kernel blocks each.
    received = admission.entries_received(config, cross, 33)
    assert received == 8 and isinstance(received, int)
    assert admission.entries_needed(config, cross, 33) == 5  # cdiv(33, 4 * 2)
    assert admission.blocks_allocated(config, cross, 33) == 2


# ---------------------------------------------------------------- checks: violations and their diagnoses


def checks_config() -> RunnerConfig:
    """Cross (bs 16, kbs 4), full (bs 16, replicated) and mamba groups under DCP 2.

    The admission helpers' config plus a mamba group, so the lengths and DCP
    layout the two sections test stay one.
    """
    config = dcp_config()
    return replace(config, groups=(*config.groups, KVCacheGroup(GroupKind.MAMBA, 16)))


def test_violations_report_every_field_of_each_broken_row() -> None:
    from crossattn_sizing.core.capacity import Shortfall, violations

    config = checks_config()

    def narrow(c: RunnerConfig) -> tuple[int, ...]:
        return (5, 6, 0)  # mamba rows hold state, never judged by token counts

    # Request 1 (33 tokens): cross needs cdiv(33, 4*2) = 5 entries (fits 5) but receives
    # cdiv(33, 32) * 4 = 8; its first position past the 5 // 4 = 1 whole manager block is 32.
    # Every request's full row needs cdiv(100, 16) = 7 > 6 (coverage) and receives 7 (allocation).
    found = violations(narrow, config, [8, 33])
    assert found == [
        Shortfall("allocation", 0, "cross", 1, 33, 8, 5, 32, config),
        Shortfall("coverage", 1, "full", 0, 100, 7, 6, 96, config),
        Shortfall("allocation", 1, "full", 0, 100, 7, 6, 96, config),
        Shortfall("coverage", 1, "full", 1, 100, 7, 6, 96, config),
        Shortfall("allocation", 1, "full", 1, 100, 7, 6, 96, config),
    ]
    for invariant in ("coverage", "allocation"):
        only = violations(narrow, config, [8, 33], (invariant,))
        assert only == [v for v in found if v.invariant == invariant]
    # Coverage of the cross row: 41 tokens need cdiv(41, 8) = 6 > 5; token 5 * 8 = 40 has no column.
    assert violations(narrow, config, [41], ("coverage",))[0] == Shortfall(
        "coverage", 0, "cross", 0, 41, 6, 5, 40, config
    )
    assert violations(lambda c: (28, 7, 1), config, [1, 200]) == []


def test_violations_refuse_encoder_lengths_the_scheduler_never_admits() -> None:
    from crossattn_sizing.core.capacity import violations

    config = checks_config()
    for bad in (0, 201):
        with pytest.raises(ValueError, match=rf"^encoder length {bad} is not admitted \(bound 200\)$"):
            violations(lambda c: (28, 7, 1), config, [1, bad])


def test_request_tokens_per_group_kind() -> None:
    from crossattn_sizing.core.capacity import request_tokens

    config = checks_config()
    assert request_tokens(config, GroupKind.CROSS, 33) == 33
    assert request_tokens(config, GroupKind.FULL, 33) == 100
    assert request_tokens(config, GroupKind.SLIDING_WINDOW, 33) == 100
    assert request_tokens(config, GroupKind.MAMBA, 33) is None


def test_explain_reads_as_a_diagnosis() -> None:
    from crossattn_sizing.core.capacity import Shortfall

    config = checks_config()  # explain() reads only the numbers the record carries
    assert Shortfall("coverage", 1, "cross", 0, 3329, 209, 128, 2048, config).explain() == (
        "coverage: group 1 (cross) request 0 has 3329 encoder tokens needing 209 columns but the row "
        "has 128; token 2048 is the first without a column"
    )
    assert Shortfall("allocation", 0, "full", 2, 100, 7, 6, 96, config).explain() == (
        "allocation: group 0 (full) request 2 receives 7 block-table entries for 100 decoder tokens "
        "but the row has 6; 1 entries spill into the next row"
    )


def test_slots_of_block_ids_past_int32_range_are_exact() -> None:
    """Block ids are stored as int32 but slots are ``id * kbs + offset`` in int64.

    A cache of more than 2**31 slots (block id 2**30 with kbs 4) must not wrap.
    """
    import torch

    from crossattn_sizing.core.slot_layout import SlotLayout
    from crossattn_sizing.impl.slot_mapping import torch_slot_mapping
    from crossattn_sizing.impl.step import SlotStep

    table = torch.tensor([2**30, 7], dtype=torch.int32)
    rows = torch.tensor([0], dtype=torch.int32)
    query_start_loc = torch.tensor([0, 2], dtype=torch.int32)
    positions = torch.tensor([1, 5], dtype=torch.int64)
    out = torch.empty(3, dtype=torch.int64)
    torch_slot_mapping(SlotStep(table, 2, rows, query_start_loc, positions, SlotLayout(4)), out)
    assert out.tolist() == [2**32 + 1, 7 * 4 + 1, -1]
    # Rank 1 of C = 2, I = 2: position 2 (offset 2 of 8) is its local offset 0; position 1 is rank 0's.
    out = torch.empty(2, dtype=torch.int64)
    rank_1 = SlotLayout(4, 2, 2, 1)
    torch_slot_mapping(SlotStep(table, 2, rows, query_start_loc, torch.tensor([1, 2]), rank_1), out)
    assert out.tolist() == [-1, 2**32]


# ---------------------------------------------------------------- policies: loading by name


def test_policy_load_errors_say_exactly_what_is_wrong() -> None:
    from crossattn_sizing.base.errors import PolicyLoadError
    from crossattn_sizing.core.policies import BUILTIN_POLICIES, policy_from_spec

    known = ", ".join(sorted(BUILTIN_POLICIES))
    with pytest.raises(PolicyLoadError) as info:
        policy_from_spec("mrv3")
    assert str(info.value) == f"unknown sizing policy 'mrv3': use one of {known} or module:attr"
    for spec in (":floor_div", "tests.broken_policies:"):
        with pytest.raises(PolicyLoadError) as info:
            policy_from_spec(spec)
        assert str(info.value) == f"sizing policy {spec!r}: expected the form module:attr"
    with pytest.raises(PolicyLoadError) as info:
        policy_from_spec("no_such_module_xyz:f")
    assert str(info.value) == (
        "sizing policy 'no_such_module_xyz:f': module 'no_such_module_xyz' does not import "
        "(ModuleNotFoundError: No module named 'no_such_module_xyz')"
    )
    # The module is everything before the first colon; the rest names the attribute.
    with pytest.raises(PolicyLoadError, match="has no attribute 'floor_div:x'"):
        policy_from_spec("tests.broken_policies:floor_div:x")


def test_policy_names_in_reports() -> None:
    import functools

    from crossattn_sizing.core.policies import BUILTIN_POLICIES, policy_name
    from tests.broken_policies import floor_div

    assert policy_name(BUILTIN_POLICIES["mrv2"]) == "mrv2"
    assert policy_name(floor_div) == "tests.broken_policies:floor_div"
    partial = functools.partial(floor_div)  # a module but no qualified name: its repr stands in
    assert policy_name(partial) == f"functools:{partial!r}"
    anonymous = object()  # neither
    assert policy_name(anonymous) == f"?:{anonymous!r}"  # type: ignore[arg-type]


def test_checked_widths_accepts_only_non_negative_ints_and_names_the_policy() -> None:
    from crossattn_sizing.base.errors import PolicyLoadError
    from crossattn_sizing.core.policies import checked_widths
    from tests.broken_policies import floor_div

    config = RunnerConfig(max_model_len=8, max_num_batched_tokens=8, groups=(KVCacheGroup("cross", 4),))
    assert checked_widths(lambda c: (0,), config) == (0,)
    assert checked_widths(lambda c: [3], config) == (3,)
    for bad in ((2.5,), (True,), (-1,), ("3",)):
        with pytest.raises(PolicyLoadError, match="expected 1 non-negative ints, one per KV-cache group"):
            checked_widths(lambda c, bad=bad: bad, config)
    with pytest.raises(PolicyLoadError) as info:
        checked_widths(two_widths, config)
    assert str(info.value) == (
        "sizing policy tests.test_helpers_and_diagnoses:two_widths returned (1, 2): expected 1 non-negative "
        "ints, one per KV-cache group"
    )
    with pytest.raises(PolicyLoadError) as info:
        checked_widths(returns_nothing(floor_div), config)
    assert str(info.value) == (
        "sizing policy tests.test_helpers_and_diagnoses:returns_nothing.<locals>.wrapped returned a NoneType "
        "(None): expected a list or tuple of ints, one per group"
    )


def two_widths(config: RunnerConfig) -> tuple[int, ...]:
    """Two groups' worth of widths whatever the config (a user's slip the harness must name)."""
    return (1, 2)


def returns_nothing(policy):  # type: ignore[no-untyped-def]
    """A policy wrapper that forgets to return (a user's slip the harness must name)."""

    def wrapped(config: RunnerConfig) -> None:
        policy(config)

    return wrapped
