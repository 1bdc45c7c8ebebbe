"""The capacity strategies reach what policies branch on, often: checked on plain random bytes.

Hypothesis feeds :class:`properties.capacity_strategies.Dials` the bytes; here a seeded
``random`` does, 4000 times, so the shares below are what a run's draws look
like before Hypothesis's own biases (which only add edge and zero bytes).
"""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from crossattn_sizing.core.config import GroupKind, RunnerConfig
from properties.capacity_strategies import (
    DIAL_BYTES,
    MAX_LEN,
    OTHER_KINDS,
    CapacityCase,
    Dials,
    read_case,
    width_units,
)

N = 4000


@pytest.fixture(scope="module")
def cases() -> list[tuple[CapacityCase, bool]]:
    rng = random.Random(14)
    return [read_case(Dials(rng.randbytes(DIAL_BYTES))) for _ in range(N)]


def share(cases: list[tuple[CapacityCase, bool]], pred) -> float:  # type: ignore[no-untyped-def]
    return sum(1 for c, _ in cases if pred(c.config)) / len(cases)


def strict_order(config: RunnerConfig) -> tuple[str, ...]:
    """Names of the present lengths from smallest to largest, or () when two tie."""
    named = {"M": config.max_model_len, "E": config.encoder_budget}
    if config.max_source_positions is not None:
        named["S"] = config.max_source_positions
    if len(set(named.values())) < len(named):
        return ()
    return tuple(sorted(named, key=named.__getitem__))


def test_every_cell_of_the_decision_table_is_drawn_often(cases: list[tuple[CapacityCase, bool]]) -> None:
    cells = Counter(
        (c.config.max_source_positions is None, c.config.max_num_encoder_input_tokens is not None,
         strict_order(c.config))
        for c, stress in cases if not stress
    )  # fmt: skip
    for s_absent, e_set in itertools.product((True, False), repeat=2):
        names = ("M", "E") if s_absent else ("M", "E", "S")
        for order in itertools.permutations(names):
            if not e_set and order.index("E") < order.index("M"):
                continue  # E defaults to B >= M: that order cannot start
            got = cells[(s_absent, e_set, order)] / N
            assert got >= 0.005, (s_absent, e_set, order, got)
    assert share(cases, lambda c: c.max_source_positions == 0) >= 0.02


def test_dcp_block_sizes_and_group_kinds_each_come_often(cases: list[tuple[CapacityCase, bool]]) -> None:
    assert 0.25 <= share(cases, lambda c: c.dcp_size > 1) <= 0.75

    def cross(c: RunnerConfig):  # type: ignore[no-untyped-def]
        return c.groups[c.cross_groups()[0]]

    assert share(cases, lambda c: cross(c).block_size > 128) >= 0.2
    assert share(cases, lambda c: cross(c).block_size <= 128) >= 0.2
    assert share(cases, lambda c: cross(c).bpk > 1) >= 0.2
    kinds = Counter(
        tuple(sorted(g.kind.value for g in c.config.groups if g.kind is not GroupKind.CROSS))
        for c, stress in cases if not stress
    )  # fmt: skip
    for combo in OTHER_KINDS:
        assert kinds[tuple(sorted(k.value for k in combo))] / N >= 0.05, combo


def test_lengths_are_small_edge_and_very_large_often(cases: list[tuple[CapacityCase, bool]]) -> None:
    def longest(c: RunnerConfig) -> int:
        return max(c.max_model_len, c.encoder_budget, c.source_positions)

    assert share(cases, lambda c: longest(c) >= 1 << 17) >= 0.25
    assert share(cases, lambda c: longest(c) >= 1 << 20) >= 0.05
    assert share(cases, lambda c: c.max_model_len <= 4096) >= 0.1
    assert max(longest(c.config) for c, _ in cases) <= MAX_LEN + MAX_LEN  # B may add to the longest

    def on_edge(c: RunnerConfig) -> bool:
        g = c.groups[c.cross_groups()[0]]
        return any(c.encoder_budget % u in (0, 1, u - 1) for u in width_units(g, c.dcp_factor(g)))

    assert share(cases, on_edge) >= 0.3
    at_bound = sum(1 for c, _ in cases if max(c.encoder_lens) == min(c.config.encoder_budget,
                                                                      c.config.max_num_batched_tokens))
    assert at_bound / N >= 0.4


def test_zero_bytes_are_the_stress_corner() -> None:
    """What Hypothesis tries first, and shrinks toward: every dial hard at once."""
    case, stress = read_case(Dials(bytes(DIAL_BYTES)))
    config = case.config
    assert stress
    lengths = (config.max_model_len, config.encoder_budget, config.max_source_positions)
    assert lengths == (131072, 131073, None)
    assert config.dcp_size == 2
    full, cross = config.groups
    assert (full.kind, full.dcp_sharded, cross.kind) == (GroupKind.FULL, False, GroupKind.CROSS)
    assert (cross.block_size, cross.kbs) == (16, 8)
    assert case.encoder_lens == (131073,)
