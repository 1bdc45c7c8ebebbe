"""BlockPool: the null block is never handed out, ids are distinct, exhaustion is an error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference.pool import NULL_BLOCK_ID, BlockPool, PoolExhausted

from .strategies import FAST, seeds


def test_ids_are_real_shuffled_and_deterministic() -> None:
    pool = BlockPool(21, seed=0)
    ids = pool.allocate(20)
    assert sorted(ids) == list(range(1, 21))
    assert ids != sorted(ids), "the free list should come out non-monotonic"
    assert BlockPool(21, seed=0).allocate(20) == ids
    assert pool.num_free == 0


def test_exhaustion_raises_and_leaves_the_pool_unchanged() -> None:
    pool = BlockPool(4)
    pool.allocate(2)
    with pytest.raises(PoolExhausted) as info:
        pool.allocate(2)
    assert isinstance(info.value, ValueError)
    assert (info.value.requested, info.value.available) == (2, 1)
    assert pool.num_free == 1


def test_free_returns_ids_and_refuses_bad_ones() -> None:
    pool = BlockPool(5, seed=3)
    ids = pool.allocate(3)
    pool.free(ids[:1])
    assert pool.num_free == 2
    with pytest.raises(ValueError):
        pool.free(ids[:1])  # double free
    with pytest.raises(ValueError):
        pool.free([NULL_BLOCK_ID])
    with pytest.raises(ValueError):
        pool.free([ids[1], ids[1]])
    assert pool.num_free == 2


def test_a_pool_of_only_the_null_block_is_empty() -> None:
    assert BlockPool(1).num_free == 0
    assert BlockPool(1).allocate(0) == []


@FAST
@given(
    num_blocks=st.integers(1, 40),
    seed=seeds,
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 8)), max_size=20),
)
def test_allocated_and_free_ids_always_partition_the_real_ids(
    num_blocks: int, seed: int, ops: list[tuple[bool, int]]
) -> None:
    pool = BlockPool(num_blocks, seed)
    held: list[int] = []
    for is_alloc, n in ops:
        if is_alloc:
            try:
                new = pool.allocate(n)
            except PoolExhausted:
                assert n > pool.num_free
                continue
            assert NULL_BLOCK_ID not in new and not set(new) & set(held)
            assert all(1 <= b < num_blocks for b in new)
            held += new
        else:
            released, held = held[:n], held[n:]
            pool.free(released)
        assert pool.allocated == frozenset(held)
        assert pool.num_free + len(held) == num_blocks - 1
