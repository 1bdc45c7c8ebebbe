"""Hypothesis strategies and settings shared by the oracle's tests.

Sizes are kept small on purpose: every example should run in milliseconds, and the
layout logic is fully exercised by a handful of blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""Per-test settings: small example counts, no deadline (the machine is shared)."""

REL_TOL = 1e-9
ABS_TOL = 1e-9
"""Tolerances for comparing two float64 evaluations of the same attention (math.isclose)."""

KERNEL_BLOCK_SIZES = (1, 2, 4, 8)
DCP_SIZES = (1, 2, 3, 4)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class Layout:
    """A valid (kbs, C, I) triple: ``I`` divides ``kbs``."""

    kernel_block_size: int
    dcp_size: int
    interleave: int

    @property
    def virtual_block_size(self) -> int:
        return self.kernel_block_size * self.dcp_size


@st.composite
def layouts(draw: st.DrawFn, dcp_sizes: tuple[int, ...] = DCP_SIZES) -> Layout:
    kbs = draw(st.sampled_from(KERNEL_BLOCK_SIZES))
    dcp_size = draw(st.sampled_from(dcp_sizes))
    interleave = draw(st.sampled_from(divisors(kbs)))
    return Layout(kbs, dcp_size, interleave)


def vectors(dim: int) -> st.SearchStrategy[list[float]]:
    return st.lists(st.floats(-3.0, 3.0, allow_nan=False, allow_infinity=False), min_size=dim, max_size=dim)


def matrices(rows: int, dim: int) -> st.SearchStrategy[list[list[float]]]:
    return st.lists(vectors(dim), min_size=rows, max_size=rows)


scales = st.floats(0.05, 2.0, allow_nan=False, allow_infinity=False)
seeds = st.integers(0, 2**16)
