"""The admission model (``crossattn_sizing.core.admission``) against the reference oracle.

``admission`` says, per group, which row entry holds a position, how many entries
``e`` tokens need (coverage) and how many the manager appends (allocation). The
oracle (``reference/``, standard library only) answers the same questions from
its own layout: the column its slot mapping reads for a position, the narrowest
row its sharded cross-attention mapping accepts, the blocks each DCP rank fills
with its share of the tokens, and the kernel-block ids those blocks expand to.
Encoder lengths are drawn independently of ``admission.encoder_bound``, so the
generator does not share the model's assumption about what reaches a table.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from crossattn_sizing.core import admission
from crossattn_sizing.core.config import KVCacheGroup, RunnerConfig

from .admission_assertions import assert_agrees, assert_narrowest_row, case_lines
from .capacity_strategies import runner_configs
from .oracle import ColumnOutOfRange, expand, local_length, self_attention_slots

MAX_TOKENS = 3000
"""Longer than most drawn rows, short enough for the oracle's per-position loop."""


def _layout(config: RunnerConfig, group: KVCacheGroup) -> tuple[int, int, int]:
    """``(kbs, C, I)`` as the oracle takes them: an unsharded group is ``C = 1``."""
    dcp_size = config.dcp_factor(group)
    return group.kbs, dcp_size, config.dcp_interleave if dcp_size > 1 else 1


def _oracle_accepts(width: int, e: int, kbs: int, dcp_size: int, interleave: int) -> bool:
    """Whether the oracle's sharded mapping finds a column for all ``e`` tokens on every rank."""
    row = list(range(width))
    try:
        for rank in range(dcp_size):
            self_attention_slots(row, range(e), kbs, dcp_size, interleave, rank, e)
    except ColumnOutOfRange:
        return False
    return True


def _attention_group(data: st.DataObject, config: RunnerConfig) -> KVCacheGroup:
    attention = [g for g in config.groups if g.kind.is_attention]
    return data.draw(st.sampled_from(attention), label="group")


@given(config=runner_configs(), data=st.data())
def test_entries_needed_is_the_narrowest_row_the_oracle_accepts(
    config: RunnerConfig, data: st.DataObject
) -> None:
    """``entries_needed(e)`` entries hold every token in the oracle's layout; one fewer does not."""
    group = _attention_group(data, config)
    e = data.draw(st.integers(1, MAX_TOKENS), label="encoder_len")
    layout = _layout(config, group)
    needed = admission.entries_needed(config, group, e)
    assert_narrowest_row(needed, e, lambda width: _oracle_accepts(width, e, *layout),
                         case_lines(config, group, layout))


@given(config=runner_configs(), data=st.data())
def test_column_of_is_the_oracle_column(config: RunnerConfig, data: st.DataObject) -> None:
    """The entry ``admission.column_of`` names is the one the oracle's slot mapping reads."""
    group = _attention_group(data, config)
    position = data.draw(st.integers(0, 10 * MAX_TOKENS), label="position")
    layout = _layout(config, group)
    kbs, dcp_size, interleave = layout
    try:
        self_attention_slots([], [position], kbs, dcp_size, interleave, 0, 1)
    except ColumnOutOfRange as err:
        column = err.column
    else:  # the oracle's own contract (an empty row holds nothing), not the model under test
        raise AssertionError("the reference oracle found a column in an empty row")
    assert_agrees(f"column_of(position {position})", admission.column_of(config, group, position), column,
                  case_lines(config, group, layout))


@given(config=runner_configs(), data=st.data())
def test_entries_received_are_the_blocks_every_rank_fills(config: RunnerConfig, data: st.DataObject) -> None:
    """Allocation: each rank holds its share of ``e`` in manager blocks of ``bs``; the row receives
    the expanded ids of as many blocks as the fullest rank fills."""
    group = _attention_group(data, config)
    e = data.draw(st.integers(1, MAX_TOKENS), label="encoder_len")
    layout = _layout(config, group)
    _, dcp_size, interleave = layout
    context = case_lines(config, group, layout)
    fullest = max(local_length(e, dcp_size, interleave, rank) for rank in range(dcp_size))
    blocks = -(-fullest // group.block_size)
    assert_agrees(f"blocks_allocated({e} tokens)", admission.blocks_allocated(config, group, e), blocks,
                  context)
    ids = list(range(1, blocks + 1))
    assert_agrees(f"expand_ids({ids})", admission.expand_ids(group, ids), expand(ids, group.bpk), context)
    assert_agrees(f"entries_received({e} tokens)", admission.entries_received(config, group, e),
                  len(expand(ids, group.bpk)), context)
