"""The capacity module's vectorised form (``prove``'s) agrees with its scalar form."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from crossattn_sizing.core import capacity
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig


@st.composite
def rows(draw: st.DrawFn) -> tuple[RunnerConfig, int, int]:
    """A DCP-sharded cross row: its config, a width in entries and a token count."""
    kbs = draw(st.sampled_from((1, 2, 3, 4, 8, 16)))
    bs = kbs * draw(st.integers(1, 8))
    dcp = draw(st.integers(1, 4))
    config = RunnerConfig(
        max_model_len=64,
        max_num_batched_tokens=64,
        dcp_size=dcp,
        groups=(KVCacheGroup(GroupKind.CROSS, bs, kbs),),
    )
    return config, draw(st.integers(0, 600)), draw(st.integers(1, 10_000))


@given(st.lists(rows(), min_size=1, max_size=20))
def test_vector_overflows_equal_the_scalar_demand(cases: list[tuple[RunnerConfig, int, int]]) -> None:
    """Element for element, ``vector_overflows`` says what ``demand(...).overflows`` says."""
    groups = [config.groups[0] for config, _, _ in cases]
    fast = capacity.vector_overflows(
        np.array([w for _, w, _ in cases]),
        np.array([n for _, _, n in cases]),
        np.array([g.block_size for g in groups]),
        np.array([g.kbs for g in groups]),
        np.array([config.dcp_size for config, _, _ in cases]),
    )
    slow = [bool(capacity.demand(c, c.groups[0], n).overflows(w)) for c, w, n in cases]
    assert fast.tolist() == slow


def test_cross_overflow_names_the_first_invariant_broken() -> None:
    """3329 tokens in a 128-entry row (bs 16): coverage fails first, 209 entries needed."""
    from crossattn_sizing.core import known_configs

    config = known_configs.nemotron_parse()
    over = capacity.cross_overflow((128, 128), config, known_configs.NEMOTRON_PAGE_TOKENS)
    assert over == capacity.Shortfall("coverage", 1, "cross", 0, 3329, 209, 128, 2048, config)
    assert capacity.cross_overflow((128, 209), config, 3329) is None


def test_cross_overflow_defaults_to_the_admitted_bound() -> None:
    """Without a length, every cross row is asked to hold the largest admitted one (here B = E = 4096)."""
    from crossattn_sizing.core import known_configs

    config = known_configs.nemotron_parse()
    assert capacity.cross_overflow((256, 256), config) is None  # 4096 tokens need 256 entries of 16
    expected = capacity.Shortfall("coverage", 1, "cross", 0, 4096, 256, 255, 4080, config)
    assert capacity.cross_overflow((256, 255), config) == expected


def test_vector_form_is_exact_integer_arithmetic_whatever_the_input_dtype() -> None:
    """int64 throughout: exact at 2**60, and int32 inputs are widened before any product.

    Kept in int32, ``kbs * C`` (2**16 * 2**15) would wrap to -2**31 and lose the one entry needed.
    """
    big = 2**60
    assert capacity.vector_overflows(np.array([big]), np.array([big + 1]), 1, 1, 1).tolist() == [True]
    assert capacity.vector_overflows(np.array([big]), np.array([big]), 1, 1, 1).tolist() == [False]
    assert capacity.vector_overflows(np.array([big - 1]), np.array([big - 1]), 1, 1, 1).tolist() == [False]
    i32 = np.int32
    wide = capacity.vector_overflows(
        np.array([0], i32), np.array([2**31 - 1], i32), np.array([2**16], i32),
        np.array([2**16], i32), np.array([2**15], i32),
    )  # fmt: skip
    assert wide.tolist() == [True]  # 2**31 - 1 tokens need one entry of 2**31 positions; the row has none
