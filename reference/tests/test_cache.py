"""PagedKVCache: cells start poisoned, the pad slot writes nothing, bad slots raise."""

from __future__ import annotations

import math

import pytest

from reference.cache import PagedKVCache, SlotOutOfRange


def test_every_cell_starts_poisoned() -> None:
    cache = PagedKVCache(num_blocks=2, block_size=3, head_dim=2)
    assert cache.num_slots == 6
    assert all(cache.is_poisoned(slot) for slot in range(6))
    key, value = cache.read(4)
    assert all(math.isnan(x) for x in key + value)


def test_write_read_and_pad_slot() -> None:
    cache = PagedKVCache(2, 3, 2)
    cache.write(4, [1.0, 2.0], [3.0, 4.0])
    cache.write(-1, [9.0, 9.0], [9.0, 9.0])
    assert cache.read(4) == ([1.0, 2.0], [3.0, 4.0])
    assert cache.written == frozenset({4})
    assert [cache.is_poisoned(s) for s in range(6)] == [True] * 4 + [False, True]


def test_reads_are_copies() -> None:
    cache = PagedKVCache(1, 1, 1)
    cache.write(0, [1.0], [2.0])
    key, _ = cache.read(0)
    key[0] = 5.0
    assert cache.read(0) == ([1.0], [2.0])


def test_out_of_range_slots_and_wrong_lengths_raise() -> None:
    cache = PagedKVCache(2, 3, 2)
    with pytest.raises(SlotOutOfRange):
        cache.write(6, [0.0, 0.0], [0.0, 0.0])
    with pytest.raises(IndexError):
        cache.read(-1)
    with pytest.raises(ValueError):
        cache.write(0, [0.0], [0.0, 0.0])


def test_poison_resets_every_cell() -> None:
    cache = PagedKVCache(1, 2, 1)
    cache.write(1, [1.0], [1.0])
    cache.poison()
    assert cache.is_poisoned(1) and cache.written == frozenset()
