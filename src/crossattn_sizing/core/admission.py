"""The admission model: which encoder lengths reach a block table, and which ids a row receives.

The scheduler never chunks an encoder input and never schedules a request whose
encoder tokens exceed ``E``; start-up refuses an item over ``B``. So the bound a
cross-attention row must cover is ``min(E, B)`` tokens (docs/spec.md §4).
"""

from __future__ import annotations

from collections.abc import Sequence

from crossattn_sizing.base.intmath import cdiv
from crossattn_sizing.core.config import KVCacheGroup, RunnerConfig


def encoder_bound(config: RunnerConfig) -> int:
    """The largest encoder length any admitted request can have."""
    return min(config.encoder_budget, config.max_num_batched_tokens)


def admits(config: RunnerConfig, encoder_len: int) -> bool:
    """Whether a request with ``encoder_len`` encoder tokens is ever scheduled."""
    return 1 <= encoder_len <= encoder_bound(config)


def tokens_per_entry(config: RunnerConfig, group: KVCacheGroup) -> int:
    """Token positions one row entry spans: a kernel block on each of ``C_g`` ranks.

    Under DCP each entry names one kernel block per rank, so it covers
    ``kbs * C_g`` positions of the (virtual) sequence: the sharded layout the
    width formula divides by ``C`` for.
    """
    return group.kbs * config.dcp_factor(group)


def column_of(config: RunnerConfig, group: KVCacheGroup, position: int) -> int:
    """The row entry that holds ``position`` under the sharded layout."""
    return position // tokens_per_entry(config, group)


def entries_needed(config: RunnerConfig, group: KVCacheGroup, num_tokens: int) -> int:
    """Row entries that ``num_tokens`` positions need (coverage, invariant 1)."""
    return cdiv(num_tokens, tokens_per_entry(config, group))


def blocks_allocated(config: RunnerConfig, group: KVCacheGroup, num_tokens: int) -> int:
    """Manager blocks the KV-cache manager allocates for ``num_tokens`` positions."""
    return cdiv(num_tokens, group.block_size * config.dcp_factor(group))


def expand_ids(group: KVCacheGroup, block_ids: Sequence[int]) -> list[int]:
    """The row entries for manager block ids: each ``b`` becomes ``b*bpk + k``."""
    bpk = group.bpk
    return [b * bpk + k for b in block_ids for k in range(bpk)]


def entries_received(config: RunnerConfig, group: KVCacheGroup, num_tokens: int) -> int:
    """Entries appended to the row for ``num_tokens`` positions (allocation, invariant 2)."""
    return blocks_allocated(config, group, num_tokens) * group.bpk
