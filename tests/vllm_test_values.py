"""Slot mappings and block-table contents that vLLM's own unit tests state by hand, as data.

Facts read from vLLM's ``tests/v1/worker/test_block_table_slot_mapping.py``
(its hand-computed cases) and ``tests/v1/worker/test_gpu_block_table.py``
(staged writes over three groups, one group, and a decode step); the cases
and the code that runs them are this project's. They check the adapter and
the implementations against values a vLLM developer wrote down, not against
another model of the same rules: tests/test_vllm_test_values.py runs them on
the torch implementation and the reference (default run),
tests/test_engine_real.py on the releases' own ``BlockTables`` (``nox -s engine``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SlotCase:
    """One request batch through one group's table; ``expected`` are the slots of tokens ``checked``."""

    name: str
    rows: tuple[tuple[int, ...], ...]  # manager block ids appended to row r, per request r
    positions: tuple[tuple[int, ...], ...]  # each request's token positions
    expected: tuple[int, ...]
    block_size: int = 16
    kernel_block_size: int = 16
    dcp: tuple[int, int, int] = (1, 0, 1)  # (size, rank, interleave)
    width: int = 32  # manager blocks per row (the vLLM tests' max_num_blocks_per_req)
    first_checked: int = 0  # expected covers tokens first_checked .. first_checked + len(expected)

    @property
    def bpk(self) -> int:
        return self.block_size // self.kernel_block_size


SLOT_CASES = (
    SlotCase("single request across block boundaries", ((5, 6, 7),), ((0, 15, 16, 47),), (80, 95, 96, 127)),
    SlotCase("two requests, each its own row", ((9, 2), (7, 4)), ((3,), (20,)), (147, 68)),
    SlotCase("tokens across the kernel's 1024-token tile", (tuple(range(1, 66)),), (tuple(range(1030)),),
             tuple(range(1039, 1046)), width=65, first_checked=1023),
    SlotCase("DCP 2, rank 1 owns the odd offsets", ((5, 6),), ((0, 1, 2, 3, 4, 5, 32, 33),),
             (-1, 80, -1, 81, -1, 82, -1, 96), dcp=(2, 1, 1)),
    SlotCase("32-token blocks over 16-token kernel blocks", ((5, 9),), ((0, 15, 16, 31, 32, 47, 48),),
             (160, 175, 176, 191, 288, 303, 304), block_size=32),
    SlotCase("a decode step over 4-token blocks", ((7, 8),), ((1, 2, 3),), (29, 30, 31), block_size=4,
             kernel_block_size=4, width=4),
)  # fmt: skip
"""31 slots, each written by hand in vLLM's tests."""


@dataclass(frozen=True)
class TableCase:
    """Appends to several groups' tables; ``rows[g][r]`` the ids row ``r`` of group ``g`` then holds."""

    name: str
    block_sizes: tuple[int, ...]
    width: int
    num_rows: int
    appends: tuple[tuple[int, tuple[tuple[int, ...], ...]], ...]  # (row, ids per group), in order
    rows: tuple[tuple[tuple[int, ...], ...], ...]


TABLE_CASES = (
    TableCase(
        "three groups, two rows, a second append to row 0", (16, 32, 8), 8, 4,
        ((0, ((1, 2), (10, 11), ())), (1, ((3,), (12,), (5, 6))), (0, ((7,), (13,), (8,)))),
        (((1, 2, 7), (3,)), ((10, 11, 13), (12,)), ((8,), (5, 6))),
    ),
    TableCase("one group", (16,), 4, 2, ((0, ((1, 2),)),), (((1, 2), ()),)),
)  # fmt: skip
"""13 block ids and their counts per row, as vLLM's tests state them after the staged writes."""
