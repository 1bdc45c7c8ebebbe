"""The capacity module's vectorised form (``prove``'s) agrees with its scalar form."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from crossattn_sizing import capacity
from crossattn_sizing.config import GroupKind, KVCacheGroup, RunnerConfig


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
    from crossattn_sizing import known_configs

    config = known_configs.nemotron_parse()
    over = capacity.cross_overflow((128, 128), config, known_configs.NEMOTRON_PAGE_TOKENS)
    assert over == capacity.CrossOverflow(1, "coverage", 3329, 209, 128)
    assert capacity.cross_overflow((128, 209), config, 3329) is None
