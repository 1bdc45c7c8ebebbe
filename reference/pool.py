"""Block allocator of the reference model.

The engine's KV-cache manager hands out block ids from a free list. Block id 0 is the
null block: it is a placeholder that is never allocated, so a real id is always
``>= 1`` and ``< num_blocks``. The free list is shuffled from a seed so that a request's
ids come out non-monotonic: an implementation that silently assumes contiguous or
sorted ids then fails a differential test instead of passing by luck.
"""

from __future__ import annotations

import random

NULL_BLOCK_ID = 0
"""The placeholder block; never handed out, never freed."""


class PoolExhausted(ValueError):
    """Raised when an allocation asks for more blocks than are free."""

    def __init__(self, requested: int, available: int) -> None:
        super().__init__(f"requested {requested} blocks but only {available} are free")
        self.requested = requested
        self.available = available


class BlockPool:
    """A deterministic pool of block ids ``1 .. num_blocks-1``.

    Allocation pops from the front of a seeded shuffle; freed ids go to the back, so a
    freed id is reused only after the others, as in an LRU free queue.
    """

    def __init__(self, num_blocks: int, seed: int = 0) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1 (the null block), got {num_blocks}")
        self.num_blocks = num_blocks
        free = list(range(NULL_BLOCK_ID + 1, num_blocks))
        random.Random(seed).shuffle(free)
        self._free: list[int] = free
        self._allocated: set[int] = set()

    @property
    def num_free(self) -> int:
        """How many ids can still be allocated."""
        return len(self._free)

    @property
    def allocated(self) -> frozenset[int]:
        """The ids handed out and not yet freed."""
        return frozenset(self._allocated)

    def allocate(self, n: int) -> list[int]:
        """Hand out ``n`` distinct ids, all-or-nothing.

        Raises ``PoolExhausted`` (a ``ValueError``) without changing the pool when fewer
        than ``n`` ids are free.
        """
        if n < 0:
            raise ValueError(f"cannot allocate a negative number of blocks: {n}")
        if n > len(self._free):
            raise PoolExhausted(n, len(self._free))
        ids, self._free = self._free[:n], self._free[n:]
        self._allocated.update(ids)
        return ids

    def free(self, ids: list[int]) -> None:
        """Return ids to the pool.

        Freeing the null block, an id never allocated, or the same id twice is a caller
        bug and raises ``ValueError`` before anything is returned.
        """
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate ids in free(): {ids}")
        for block_id in ids:
            if block_id not in self._allocated:
                raise ValueError(f"block {block_id} is not allocated (null block or double free)")
        for block_id in ids:
            self._allocated.remove(block_id)
            self._free.append(block_id)
