"""Hypothesis strategies for runner configs and workloads.

Strategies live here; assertions live in :mod:`properties.assertions`; the
properties that join them live in ``test_*.py``. Every draw is labelled so a
failing example reads as a list of named choices, and the interesting regimes
(aligned edges, one token over, DCP, kernel expansion) are drawn on purpose
and recorded with ``event()`` rather than left to chance.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import event
from hypothesis import strategies as st

from crossattn_sizing import admission
from crossattn_sizing.config import GroupKind, KVCacheGroup, RunnerConfig

# Block sizes engines use, plus non-powers of two (hybrid models page with
# e.g. 48 or 96) and sizes above 128 where the alignment rules change.
COMMON_BLOCK_SIZES = (1, 8, 16, 32, 48, 64, 96, 128, 256, 512)
MAX_LEN = 1 << 15


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n`` in increasing order."""
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def block_sizes(draw: st.DrawFn, label: str = "block_size") -> int:
    return draw(st.one_of(st.sampled_from(COMMON_BLOCK_SIZES), st.integers(1, 512)), label=label)


@st.composite
def kv_groups(draw: st.DrawFn, kind: GroupKind, dcp_size: int) -> KVCacheGroup:
    """One group; its kernel block size is a divisor of its block size."""
    bs = draw(block_sizes(label=f"{kind.value}.block_size"))
    kbs = draw(st.sampled_from(divisors(bs)[::-1]), label=f"{kind.value}.kernel_block_size")
    sharded = True
    if dcp_size > 1 and kind is not GroupKind.CROSS:
        sharded = draw(st.booleans(), label=f"{kind.value}.dcp_sharded")
    return KVCacheGroup(kind, bs, kbs, sharded)


def _lengths_around(anchor: int) -> st.SearchStrategy[int]:
    """A length below, at, or just above ``anchor`` (the regimes the bug lives in)."""
    return st.one_of(
        st.integers(1, max(1, anchor)),
        st.just(anchor),
        st.integers(anchor + 1, anchor + 2 * anchor + 64),
    )


@st.composite
def runner_configs(draw: st.DrawFn, max_dcp: int = 8) -> RunnerConfig:
    """Encoder-decoder configs the engine would start with.

    ``E`` and ``S`` are drawn relative to ``M`` (below, equal, above), and
    ``S`` absent is drawn first so shrinking heads for the Nemotron-Parse shape
    (no ``max_source_positions`` field).
    """
    m = draw(st.integers(1, 8192), label="max_model_len")
    e = draw(st.one_of(st.none(), _lengths_around(m)), label="max_num_encoder_input_tokens")
    # Absent is listed twice: it is the shape of the bug, and one_of picks branches evenly.
    s = draw(st.one_of(st.none(), st.none(), st.just(0), _lengths_around(m)), label="max_source_positions")
    extra_b = draw(st.integers(0, 4096), label="batched_tokens_above_needed")
    b = max(m, e or 0) + extra_b
    c = draw(st.one_of(st.just(1), st.integers(2, max_dcp)), label="dcp_size") if max_dcp > 1 else 1
    cross = draw(kv_groups(GroupKind.CROSS, c), label="cross_group")
    others = draw(
        st.lists(
            st.sampled_from([GroupKind.FULL, GroupKind.SLIDING_WINDOW, GroupKind.MAMBA]).flatmap(
                lambda k: kv_groups(k, c)
            ),
            max_size=2,
        ),
        label="other_groups",
    )
    cross_pos = draw(st.integers(0, len(others)), label="cross_group_index")
    groups = [*others[:cross_pos], cross, *others[cross_pos:]]
    interleave = 1
    if c > 1:
        sharded_kbs = [g.kbs for g in groups if g.kind.is_attention and g.dcp_sharded]
        common = [i for i in divisors(min(sharded_kbs)) if all(k % i == 0 for k in sharded_kbs)]
        interleave = draw(st.sampled_from(common), label="dcp_interleave")
    config = RunnerConfig(
        max_model_len=m,
        max_num_batched_tokens=b,
        max_num_encoder_input_tokens=e,
        max_source_positions=s,
        dcp_size=c,
        dcp_interleave=interleave,
        max_num_reqs=draw(st.integers(1, 8), label="max_num_reqs"),
        groups=tuple(groups),
        prefix_caching=draw(st.booleans(), label="prefix_caching"),
        num_speculative_blocks=draw(st.integers(0, 2), label="num_speculative_blocks"),
    )
    record_config_events(config)
    return config


def record_config_events(config: RunnerConfig) -> None:
    """Name the regimes a config falls in, so a run's statistics show what was covered."""
    event("S absent" if config.max_source_positions is None else "S present")
    if config.encoder_budget > max(config.max_model_len, config.source_positions):
        event("E above max(M, S): pre-fix width is short")
    if config.dcp_size > 1:
        event("DCP > 1")
    if any(g.bpk > 1 for g in config.groups):
        event("kernel expansion (bpk > 1)")
    if any(g.block_size > 128 for g in config.groups):
        event("block size > 128")


@st.composite
def encoder_lengths(draw: st.DrawFn, config: RunnerConfig, label: str = "encoder_len") -> int:
    """An admitted encoder length, biased to the bound and to entry edges.

    The edges are where off-by-one sizing fails: a length that exactly fills
    its last entry, and one token more.
    """
    bound = admission.encoder_bound(config)
    cross = config.groups[config.cross_groups()[0]]
    per_entry = admission.tokens_per_entry(config, cross)
    edges = sorted(
        {
            x
            for x in (bound, bound - 1, per_entry, per_entry + 1, config.max_model_len,
                      config.max_model_len + 1, config.source_positions + 1)
            if 1 <= x <= bound
        }
    )
    e = draw(st.one_of(st.sampled_from(edges), st.integers(1, bound)), label=label)
    if e % per_entry == 0:
        event("encoder length on an entry edge")
    elif e % per_entry == 1:
        event("encoder length one token over an entry edge")
    if e == bound:
        event("encoder length at the admitted bound")
    return e


@dataclass(frozen=True)
class CapacityCase:
    """A config and the encoder lengths of one batch of admitted requests."""

    config: RunnerConfig
    encoder_lens: tuple[int, ...]


@st.composite
def capacity_cases(draw: st.DrawFn, max_dcp: int = 8) -> CapacityCase:
    config = draw(runner_configs(max_dcp=max_dcp), label="config")
    n = draw(st.integers(1, config.max_num_reqs), label="num_requests")
    lens = tuple(draw(encoder_lengths(config, label=f"encoder_len[{i}]")) for i in range(n))
    return CapacityCase(config, lens)
