"""A paged K/V cache whose cells start poisoned.

Every cell holds a key vector and a value vector of ``head_dim`` floats. Cells start as
NaN so that a read of a cell nobody wrote (another request's block, a stale block, a
slot computed from a garbage block id) turns the attention output into NaN instead of
plausible numbers: poison makes a wrong read visible.
"""

from __future__ import annotations

import math

from .slots import PAD_SLOT_ID


class SlotOutOfRange(IndexError):
    """A slot outside ``[0, num_blocks * block_size)`` (and not the pad slot)."""

    def __init__(self, slot: int, num_slots: int) -> None:
        super().__init__(f"slot {slot} is outside the cache's {num_slots} cells")
        self.slot = slot
        self.num_slots = num_slots


def _poison_vector(head_dim: int) -> list[float]:
    return [math.nan] * head_dim


class PagedKVCache:
    """``num_blocks`` blocks of ``block_size`` cells; slot ``s`` is block ``s // block_size``."""

    def __init__(self, num_blocks: int, block_size: int, head_dim: int) -> None:
        if num_blocks < 1 or block_size < 1 or head_dim < 1:
            raise ValueError(
                "num_blocks, block_size and head_dim must be >= 1, "
                f"got {num_blocks}, {block_size}, {head_dim}"
            )
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.head_dim = head_dim
        self._keys: list[list[float]] = []
        self._values: list[list[float]] = []
        self._written: set[int] = set()
        self.poison()

    @property
    def num_slots(self) -> int:
        """Cells in the cache: ``num_blocks * block_size``."""
        return self.num_blocks * self.block_size

    @property
    def written(self) -> frozenset[int]:
        """Slots written since the last ``poison``; every other cell is still NaN."""
        return frozenset(self._written)

    def poison(self) -> None:
        """Reset every key and value cell to NaN vectors."""
        self._keys = [_poison_vector(self.head_dim) for _ in range(self.num_slots)]
        self._values = [_poison_vector(self.head_dim) for _ in range(self.num_slots)]
        self._written.clear()

    def _check_slot(self, slot: int) -> None:
        if not 0 <= slot < self.num_slots:
            raise SlotOutOfRange(slot, self.num_slots)

    def is_poisoned(self, slot: int) -> bool:
        """True if any component of the cell's key or value is NaN."""
        key, value = self.read(slot)
        return any(math.isnan(x) for x in key + value)

    def write(self, slot: int, key: list[float], value: list[float]) -> None:
        """Store copies of ``key`` and ``value`` at ``slot``; the pad slot (-1) writes nothing.

        Any other slot outside the cache raises ``SlotOutOfRange``: the engine's
        scatter would corrupt memory, the oracle refuses.
        """
        if slot == PAD_SLOT_ID:
            return
        self._check_slot(slot)
        if len(key) != self.head_dim or len(value) != self.head_dim:
            raise ValueError(
                f"key/value lengths {len(key)}/{len(value)} differ from head_dim {self.head_dim}"
            )
        self._keys[slot] = list(key)
        self._values[slot] = list(value)
        self._written.add(slot)

    def read(self, slot: int) -> tuple[list[float], list[float]]:
        """Copies of the key and value at ``slot`` (NaN if never written)."""
        self._check_slot(slot)
        return list(self._keys[slot]), list(self._values[slot])
