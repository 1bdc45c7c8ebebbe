"""Block tables of the reference model: one row of block ids per request.

A group's table has a fixed width ``W`` fixed at start-up, counted in manager blocks
(spec notation). When the attention kernel uses a smaller block size than the KV-cache
manager, each manager block id ``b`` is stored as the ``bpk`` kernel-block ids
``b*bpk + k`` (``k in range(bpk)``), so a row holds ``W * bpk`` entries: its capacity.

The engine under study writes ids past a row's capacity into the next row (or past the
tensor). The oracle never writes out of bounds: ``append`` stores what fits and reports
the rest as ``overflow``, so a sizing bug becomes data a property can assert on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .checks import at_least


def expand(manager_block_ids: list[int], bpk: int) -> list[int]:
    """Kernel-block ids of manager blocks: ``b`` becomes ``b*bpk + k`` for ``k in range(bpk)``.

    Kernel block ``b*bpk + k`` covers the same cache cells as the ``k``-th sub-block of
    manager block ``b``, which is why manager and kernel slots name the same cell.
    """
    if bpk < 1:
        raise ValueError(f"bpk (kernel blocks per manager block) must be >= 1, got {bpk}")
    return [block_id * bpk + k for block_id in manager_block_ids for k in range(bpk)]


@dataclass
class AppendResult:
    """What one ``append`` did: entries stored in the row, and entries that did not fit."""

    stored: list[int] = field(default_factory=list)
    overflow: list[int] = field(default_factory=list)

    @property
    def overflowed(self) -> bool:
        """True when some entries had no column left in the row."""
        return bool(self.overflow)


class BlockTable:
    """``num_rows`` request rows, each with room for ``width * bpk`` entries.

    ``width`` is in manager blocks (the spec's ``W``); ``bpk`` is kernel blocks per
    manager block (1 when the kernel and manager block sizes agree).
    """

    def __init__(self, num_rows: int, width: int, bpk: int = 1) -> None:
        at_least("num_rows", num_rows, 0)
        at_least("width", width, 0)
        at_least("bpk", bpk, 1)
        self.num_rows = num_rows
        self.width = width
        self.bpk = bpk
        self._rows: list[list[int]] = [[] for _ in range(num_rows)]

    @property
    def capacity(self) -> int:
        """Entries one row can hold: ``width * bpk``."""
        return self.width * self.bpk

    def _check_row(self, row: int) -> None:
        if not 0 <= row < self.num_rows:
            raise IndexError(f"row {row} is outside the table's {self.num_rows} rows")

    def append(self, row: int, manager_block_ids: list[int]) -> AppendResult:
        """Expand ``manager_block_ids`` and store as many entries as the row has room for.

        The rest is returned as ``overflow`` and stored nowhere. Because both the
        capacity and each expansion are multiples of ``bpk``, the split always falls on
        a manager-block boundary.
        """
        self._check_row(row)
        if any(block_id < 0 for block_id in manager_block_ids):
            raise ValueError(f"block ids must be >= 0: {manager_block_ids}")
        entries = expand(manager_block_ids, self.bpk)
        stored_row = self._rows[row]
        room = self.capacity - len(stored_row)
        stored, overflow = entries[:room], entries[room:]
        stored_row.extend(stored)
        return AppendResult(stored=stored, overflow=overflow)

    def row(self, row: int) -> list[int]:
        """A copy of the entries stored so far in ``row``."""
        self._check_row(row)
        return list(self._rows[row])

    def clear(self, row: int) -> None:
        """Empty ``row`` (the request finished or was preempted)."""
        self._check_row(row)
        self._rows[row].clear()
