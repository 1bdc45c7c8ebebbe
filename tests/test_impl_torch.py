"""Unit tests of the torch path: layout helpers, merge, duplicate slots, empty ranks, poison."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from crossattn_sizing.core.slot_layout import SlotLayout, global_position, local_length
from crossattn_sizing.impl.attention import lse_merge, resolve_duplicate_slots, torch_paged_attention
from crossattn_sizing.impl.slot_mapping import global_positions
from crossattn_sizing.impl.step import AttentionStep
from reference import attention as ref_attention
from reference import slots as ref_slots


@st.composite
def layouts(draw: st.DrawFn) -> SlotLayout:
    c = draw(st.integers(1, 4))
    i = draw(st.integers(1, 4)) if c > 1 else 1
    kbs = i * draw(st.integers(1, 4))
    return SlotLayout(kbs, c, i, draw(st.integers(0, c - 1)))


@given(layout=layouts(), n=st.integers(0, 200))
def test_layout_helpers_agree_with_the_reference(layout: SlotLayout, n: int) -> None:
    c, i, r, kbs = layout.dcp_size, layout.interleave, layout.rank, layout.kernel_block_size
    assert local_length(n, layout) == ref_slots.local_length(n, c, i, r)
    expected = [ref_slots.global_position(j, kbs, c, i, r) for j in range(n)]
    assert [global_position(j, layout) for j in range(n)] == expected
    assert global_positions(n, layout, "cpu").tolist() == expected


def test_invalid_layout_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        SlotLayout(kernel_block_size=6, dcp_size=2, interleave=4)
    with pytest.raises(ValueError):
        SlotLayout(kernel_block_size=4, dcp_size=2, rank=2)


@given(
    lses=st.lists(
        st.lists(st.one_of(st.just(-math.inf), st.floats(-20, 20)), min_size=3, max_size=3),
        min_size=1,
        max_size=4,
    ),
    seed=st.integers(0, 1000),
)
def test_lse_merge_matches_the_reference(lses: list[list[float]], seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    outs = [torch.randn(3, 1, 2, generator=gen) for _ in lses]
    for out, lse in zip(outs, lses, strict=True):  # a rank that saw no key outputs 0
        out[torch.tensor(lse) == -math.inf] = 0.0
    got = lse_merge(outs, [torch.tensor(lse, dtype=torch.float32)[:, None] for lse in lses])
    partials = [(o[:, 0].double().tolist(), lse) for o, lse in zip(outs, lses, strict=True)]
    want = torch.tensor(ref_attention.merge_partials(partials), dtype=torch.float64)
    torch.testing.assert_close(got[:, 0].double(), want, rtol=1e-5, atol=1e-6)


def test_resolve_duplicate_slots_keeps_the_last_writer() -> None:
    slots = torch.tensor([5, -1, 7, 5, 9, 7], dtype=torch.int64)
    assert resolve_duplicate_slots(slots).tolist() == [-1, -1, -1, 5, 9, 7]
    assert resolve_duplicate_slots(torch.tensor([-1, -1])).tolist() == [-1, -1]


def _cache(cells: int) -> tuple[torch.Tensor, torch.Tensor]:
    k = torch.full((cells, 1, 1, 2), float("nan"))
    return k, k.clone()


def test_a_query_that_sees_no_key_gets_zero_and_minus_infinity() -> None:
    # Rank 1 of C=2, I=1, kbs=1 holds position 1; a causal query at position 0 sees nothing there.
    key_cache, value_cache = _cache(4)
    key_cache[3] = 1.0
    value_cache[3] = 2.0
    table = torch.tensor([3, 0], dtype=torch.int32)
    qsl, seq_lens = torch.tensor([0, 1], dtype=torch.int32), torch.tensor([1], dtype=torch.int32)
    step = AttentionStep(table, 1, qsl, seq_lens, torch.tensor([0]), SlotLayout(1, 2, 1, 1), True, 1.0)
    out, lse = torch_paged_attention(torch.ones(1, 1, 2), key_cache, value_cache, step)
    assert out.tolist() == [[[0.0, 0.0]]]
    assert lse.tolist() == [[-math.inf]]


def test_a_poisoned_cell_reaches_the_output() -> None:
    """Reading a cell nobody wrote must give NaN, never a plausible number."""
    key_cache, value_cache = _cache(4)
    key_cache[0] = 1.0
    value_cache[0] = 2.0  # cell 1 stays poisoned
    table = torch.tensor([0, 0], dtype=torch.int32)
    step = AttentionStep(table, 1, torch.tensor([0, 1], dtype=torch.int32),
                         torch.tensor([2], dtype=torch.int32), torch.tensor([0]), SlotLayout(2), False, 1.0)
    out, lse = torch_paged_attention(torch.ones(1, 1, 2), key_cache, value_cache, step)
    assert torch.isnan(out).all()
    assert torch.isnan(lse).all()
    merged = lse_merge([out, torch.zeros_like(out)], [lse, torch.full_like(lse, -math.inf)])
    assert torch.isnan(merged).all()
