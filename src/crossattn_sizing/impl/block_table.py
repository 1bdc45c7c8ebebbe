"""Block tables on a torch device, with the engine's spill and an optional guard.

One :class:`DeviceBlockTable` per KV-cache group: a fixed-width int32 table
``[max_num_reqs, W]`` (``W`` in stored entries, from the sizing policy under
test), a per-row entry count, ``append`` with kernel-block expansion
(``b -> b*bpk + k``), and ``gather`` of a step's rows into the input table the
attention kernel reads.

Two modes:

- guarded (default): an append past the width, or a lookup whose column is past
  the width, raises :class:`~crossattn_sizing.base.errors.CapacityError` on the host,
  before any kernel runs. On a GPU the out-of-bounds access would be silent
  garbage or a dead CUDA context, so refusing early is the only useful report.
- unguarded: the engine's behaviour in 0.24/0.25. Entries past a row's width
  are written into the next row; lookups read whatever lies there.

Past the end of the last row. On a GPU the engine writes and reads past the
tensor into unrelated memory. The harness models that memory as a *tail*
region in the same allocation, after the last row: the table's storage is one
flat tensor of ``num_rows * W + tail`` entries and ``table`` is a view of its
first ``num_rows * W``. The tail starts as zeros (the null block id), so a read
of a tail entry nobody wrote names block 0, whose NaN-poisoned cells make the
damage visible in the output. An access past the tail cannot be modelled and
is refused in both modes (``access="allocation"``); callers size the tail to
cover the longest admitted sequence so the unguarded mode never gets there.

The count of a row is kept on the host, as the engine keeps it in numpy and
copies it over; entries of a cleared row stay in place (stale ids), as in the
engine, which only resets the count.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from crossattn_sizing.base.errors import CapacityError


def expand_block_ids(manager_ids: Sequence[int], bpk: int) -> list[int]:
    """Kernel-block ids of manager blocks: ``b`` becomes ``b*bpk + k`` for ``k < bpk``."""
    return [b * bpk + k for b in manager_ids for k in range(bpk)]


class DeviceBlockTable:
    """One group's block table: rows of kernel-block ids in a flat int32 tensor.

    ``width`` counts stored entries (``W * bpk`` where ids are expanded), the unit
    sizing policies return. ``tokens_per_entry`` (``kbs * C_g``) turns a width
    into the first token position without a column, for error messages.
    """

    def __init__(
        self,
        num_rows: int,
        width: int,
        *,
        bpk: int = 1,
        tokens_per_entry: int = 1,
        group: int = 0,
        guarded: bool = True,
        tail: int | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        if num_rows < 1 or width < 0 or bpk < 1 or tokens_per_entry < 1:
            raise ValueError(
                f"invalid block table shape: rows={num_rows} width={width} bpk={bpk} "
                f"tokens_per_entry={tokens_per_entry}"
            )
        self.num_rows = num_rows
        self.width = width
        self.bpk = bpk
        self.tokens_per_entry = tokens_per_entry
        self.group = group
        self.guarded = guarded
        self.tail = max(width, 1) if tail is None else tail
        if self.tail < 0:
            raise ValueError(f"tail must be >= 0, got {self.tail}")
        self.device = torch.device(device)
        self.storage = torch.zeros(num_rows * width + self.tail, dtype=torch.int32, device=self.device)
        self.num_entries: list[int] = [0] * num_rows

    @property
    def table(self) -> torch.Tensor:
        """The ``[num_rows, width]`` view the engine allocates (without the tail)."""
        return self.storage[: self.num_rows * self.width].view(self.num_rows, self.width)

    @property
    def allocation(self) -> int:
        """Entries in the modelled allocation: rows plus tail."""
        return self.storage.numel()

    def _check_row(self, row: int) -> None:
        if not 0 <= row < self.num_rows:
            raise IndexError(f"row {row} outside the table's {self.num_rows} rows")

    def _refuse(self, row: int, needed: int, access: str) -> CapacityError:
        return CapacityError(
            self.group, row, needed, self.width, self.width * self.tokens_per_entry, access
        )

    def _check_allocation(self, row: int, start: int, stop: int) -> None:
        """Refuse (in every mode) a flat range that leaves the modelled allocation."""
        if stop > self.allocation:
            raise self._refuse(row, stop - row * self.width, "allocation")
        if start < 0:
            raise ValueError(f"negative flat index {start}")

    def append(self, row: int, manager_ids: Sequence[int]) -> list[int]:
        """Expand ``manager_ids`` and write them after the row's current entries.

        Returns the entries written. Guarded: refuses (writing nothing) when the
        row would hold more than ``width`` entries. Unguarded: writes them
        contiguously from the row's end, into the next row or the tail.
        """
        self._check_row(row)
        if any(b < 0 for b in manager_ids):
            raise ValueError(f"block ids must be >= 0: {list(manager_ids)}")
        entries = expand_block_ids(manager_ids, self.bpk)
        count = self.num_entries[row]
        needed = count + len(entries)
        if self.guarded and needed > self.width:
            raise self._refuse(row, needed, "append")
        start = row * self.width + count
        self._check_allocation(row, start, start + len(entries))
        if entries:
            values = torch.tensor(entries, dtype=torch.int32)
            self.storage[start : start + len(entries)] = values.to(self.device)
        self.num_entries[row] = needed
        return entries

    def clear(self, row: int) -> None:
        """Forget a row's entries (request finished); the ids stay in memory, stale."""
        self._check_row(row)
        self.num_entries[row] = 0

    def row(self, row: int) -> list[int]:
        """The entries the engine would read for columns ``0 .. count-1`` of ``row``.

        In the unguarded mode these run past the width into the next row, so a
        row whose spill was overwritten shows the other request's ids here.
        """
        self._check_row(row)
        start = row * self.width
        stop = start + self.num_entries[row]
        self._check_allocation(row, start, stop)
        return [int(x) for x in self.storage[start:stop].tolist()]

    def check_lookup(self, row: int, last_column: int, first_position: int | None = None) -> None:
        """Refuse a read of ``last_column`` in ``row`` that the mode does not allow.

        Guarded: any column past the width. Both modes: a flat index past the
        modelled allocation. ``first_position`` is the first token position
        without a column, for the message (default: where the width ends).
        """
        self._check_row(row)
        if last_column < 0:
            return
        first = self.width * self.tokens_per_entry if first_position is None else first_position
        if self.guarded and last_column >= self.width:
            raise CapacityError(self.group, row, last_column + 1, self.width, first, "lookup")
        if row * self.width + last_column >= self.allocation:
            raise CapacityError(self.group, row, last_column + 1, self.width, first, "allocation")

    def gather(self, rows: Sequence[int], into: DeviceBlockTable) -> None:
        """Copy the rows of a step into ``into`` (batch entry ``b`` gets ``rows[b]``).

        As the engine's gather kernel: ``count`` entries are copied flat, so a
        row longer than the width (unguarded) also spills into the next input
        row. The engine runs the copies in parallel and the spill races with the
        next copy; the model runs them in batch order, so a later batch entry's
        copy overwrites an earlier one's spill.
        """
        if into.width != self.width:
            raise ValueError(f"gather into width {into.width}, source width {self.width}")
        if len(rows) > into.num_rows:
            raise ValueError(f"{len(rows)} rows do not fit an input table of {into.num_rows}")
        for b, row in enumerate(rows):
            self._check_row(row)
            count = self.num_entries[row]
            src = row * self.width
            dst = b * into.width
            self._check_allocation(row, src, src + count)
            into._check_allocation(b, dst, dst + count)
            if count:
                into.storage[dst : dst + count] = self.storage[src : src + count]
            into.num_entries[b] = count
