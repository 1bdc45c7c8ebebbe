"""Scenarios: paged attention through a poisoned cache equals dense attention.

These tie the invariants together: slots written only inside the request's blocks,
reads reaching only written cells, cells the request does not own staying poisoned,
and a wrong read showing up as NaN rather than plausible numbers.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference.attention import attention
from reference.block_table import BlockTable
from reference.cache import PagedKVCache
from reference.model import (
    Paging,
    paged_cross_attention,
    paged_self_attention,
    run_paged_cross_attention,
    write_sequence,
)
from reference.pool import BlockPool
from reference.slots import ColumnOutOfRange, cross_attention_slots, local_slots

from .strategies import ABS_TOL, FAST, REL_TOL, Layout, cdiv, layouts, matrices, scales, seeds

NUM_BLOCKS = 48


def rows_close(a: list[list[float]], b: list[list[float]]) -> bool:
    return len(a) == len(b) and all(
        math.isclose(u, v, rel_tol=REL_TOL, abs_tol=ABS_TOL)
        for x, y in zip(a, b, strict=True)
        for u, v in zip(x, y, strict=True)
    )


# Three encoder tokens, one-dimensional heads: scores scale*[0, ln 3, 0] with scale 1.
ENCODER_KEYS = [[0.0], [math.log(3.0)], [0.0]]
ENCODER_VALUES = [[10.0], [2.0], [-5.0]]
Q = [[1.0]]


def test_engine_path_by_hand() -> None:
    # kbs = 2, row [3, 1]: positions 0, 1 in block 3 (slots 6, 7), position 2 in block 1 (slot 2).
    paging = Paging([3, 1], 2, num_blocks=4)
    run = run_paged_cross_attention(Q, ENCODER_KEYS, ENCODER_VALUES, paging, scale=1.0)
    [rank] = run.ranks
    assert rank.write_slots == [6, 7, 2]
    assert rank.read_slots == [6, 7, 2]
    # weights 1/5, 3/5, 1/5: out = 10/5 + 6/5 - 5/5 = 2.2
    assert rows_close(run.out, [[2.2]])
    assert math.isclose(run.lse[0], math.log(5.0), rel_tol=REL_TOL)
    assert rank.cache.written == frozenset({2, 6, 7})


def test_sharded_path_by_hand_two_ranks() -> None:
    # C = 2, I = 1, kbs = 2: rank 0 owns positions 0, 2; rank 1 owns 1. One column suffices.
    run = run_paged_cross_attention(
        Q,
        ENCODER_KEYS,
        ENCODER_VALUES,
        Paging([3], 2, num_blocks=4, dcp_size=2, interleave=1),
        scale=1.0,
        sharded=True,
    )
    rank0, rank1 = run.ranks
    assert (rank0.write_slots, rank0.read_slots, rank0.key_positions) == ([6, -1, 7], [6, 7], [0, 2])
    assert (rank1.write_slots, rank1.read_slots, rank1.key_positions) == ([-1, 6, -1], [6], [1])
    assert rows_close(rank0.out, [[2.5]]) and rows_close(rank1.out, [[2.0]])
    # merged: lse ln 2 and ln 3, so 2/5 * 2.5 + 3/5 * 2 = 2.2
    assert rows_close(run.out, [[2.2]])


def test_engine_path_with_a_dcp_divided_width_runs_out_of_columns() -> None:
    # e = 5, kbs = 2, C = 2: the width is cdiv(5, 2*2) = 2 columns; the engine path needs 3.
    keys = [[0.1 * p] for p in range(5)]
    divided = Paging([3, 1], 2, num_blocks=4, dcp_size=2)
    with pytest.raises(ColumnOutOfRange) as info:
        paged_cross_attention(Q, keys, keys, divided, scale=1.0, sharded=False)
    assert (info.value.position, info.value.column, info.value.width) == (4, 2, 2)
    sharded = paged_cross_attention(Q, keys, keys, divided, scale=1.0, sharded=True)
    assert rows_close(sharded, attention(Q, keys, keys, 1.0)[0])


def test_reading_through_another_requests_row_gives_nan() -> None:
    # What the engine's unmasked load does when a row is too narrow: ids of another row.
    cache = PagedKVCache(num_blocks=8, block_size=2, head_dim=1)
    write_sequence(cache, cross_attention_slots([3, 1], 3, 2, pad_to=3), ENCODER_KEYS, ENCODER_VALUES)
    cells = [cache.read(slot) for slot in local_slots([5, 6], 3, 2)]
    out, _ = attention(Q, [k for k, _ in cells], [v for _, v in cells], 1.0)
    assert math.isnan(out[0][0])


@st.composite
def cross_scenarios(draw: st.DrawFn) -> tuple:
    layout: Layout = draw(layouts())
    sharded = layout.dcp_size > 1 or draw(st.booleans())
    encoder_len = draw(st.integers(0, 24))
    dim = draw(st.integers(1, 3))
    q = draw(matrices(draw(st.integers(1, 2)), dim))
    keys = draw(matrices(encoder_len, dim))
    values = draw(matrices(encoder_len, dim))
    return layout, sharded, q, keys, values


@FAST
@given(scenario=cross_scenarios(), scale=scales, seed=seeds, others=st.integers(0, 6))
def test_paged_cross_attention_equals_dense_and_never_touches_poison(
    scenario: tuple, scale: float, seed: int, others: int
) -> None:
    layout, sharded, q, keys, values = scenario
    kbs, dcp_size = layout.kernel_block_size, layout.dcp_size
    encoder_len = len(keys)
    # Other requests hold blocks too, so the request's ids are scattered through the pool.
    pool = BlockPool(NUM_BLOCKS, seed)
    pool.allocate(others)
    columns = cdiv(encoder_len, kbs * dcp_size) if sharded else cdiv(encoder_len, kbs)
    table = BlockTable(num_rows=2, width=columns)
    assert not table.append(1, pool.allocate(columns)).overflowed
    row = table.row(1)

    run = run_paged_cross_attention(
        q,
        keys,
        values,
        Paging(row, kbs, NUM_BLOCKS, dcp_size, layout.interleave),
        scale,
        sharded=sharded,
    )
    dense_out, _ = attention(q, keys, values, scale, head_dim_v=len(q[0]))
    assert rows_close(run.out, dense_out)
    assert all(math.isfinite(x) for out_row in run.out for x in out_row)
    assert sum(len(r.read_slots) for r in run.ranks) == encoder_len
    for rank in run.ranks:
        written = rank.cache.written
        assert set(rank.read_slots) <= written, "a read reached a cell nobody wrote"
        assert all(slot // kbs in row for slot in written), "a write left the request's blocks"
        untouched = [s for s in range(rank.cache.num_slots) if s not in written]
        assert all(rank.cache.is_poisoned(s) for s in untouched)


@FAST
@given(
    layout=layouts(),
    seq_len=st.integers(0, 24),
    dim=st.integers(1, 2),
    scale=scales,
    seed=seeds,
    data=st.data(),
)
def test_paged_self_attention_with_dcp_equals_dense_causal(
    layout: Layout, seq_len: int, dim: int, scale: float, seed: int, data: st.DataObject
) -> None:
    keys = data.draw(matrices(seq_len, dim))
    values = data.draw(matrices(seq_len, dim))
    q = data.draw(matrices(2, dim))
    q_positions = data.draw(st.lists(st.integers(0, max(seq_len - 1, 0)), min_size=2, max_size=2))
    row = BlockPool(NUM_BLOCKS, seed).allocate(cdiv(seq_len, layout.virtual_block_size))
    paging = Paging(row, layout.kernel_block_size, NUM_BLOCKS, layout.dcp_size, layout.interleave)
    out = paged_self_attention(q, q_positions, keys, values, paging, scale)
    dense, _ = attention(q, keys, values, scale, causal=True, q_positions=q_positions, head_dim_v=dim)
    assert rows_close(out, dense)
