"""Capacity strategies: runner configs and batches of admitted encoder lengths, aimed where policies fail.

How a config is put together (groups, kernel blocks, interleave, ``B``) is
:mod:`properties.config_strategies`, shared with the other strategies; this
module decides what is drawn and how often. Strategies live here; assertions
live in :mod:`properties.assertions`; the properties that join them live in
``test_*.py``. A failing example reads as the :class:`CapacityCase` it built
(config and encoder lengths), and the assertion prints its diagnosis and a
reproduce command.

What a sizing policy can get wrong decides what is drawn:

* Lengths span what engines run, from a few tokens to :data:`MAX_LEN` (2M,
  past the 1M-token contexts that exist), on a log scale, so small, edge and
  very large values all come often: a policy that caps, clamps or ``min()``s a
  length fails only on large ones.
* Lengths sit on width edges on purpose: a multiple of one of the group's
  units (kernel block, manager block, aligned span; times the DCP size),
  plus or minus one token. Off-by-one slips live there and nowhere else.
* A policy is arbitrary Python and may branch on any input, so every cell of
  the decision table is drawn often and recorded with ``event()``: ``S``
  present or absent, ``E`` set or defaulting to ``B``, the order of
  ``M``/``E``/``S`` (ties included), DCP on or off, the cross block size at
  most 128 or above, and which other group kinds share the model.
* The first choice of a case is the *stress corner*, where
  every dial is at its hard setting at once (long context, one token past an
  aligned edge, ``S`` absent, DCP with a replicated group, kernel-block
  expansion). Hypothesis tries the simplest draw first, so the first example
  of every run is that corner, and a failure found there shrinks to it: a
  fixed, readable shape. The corner is an eighth of later draws; the rest
  explore the decision table.

Speed: a capacity example must cost well under a millisecond, and Hypothesis
spends tens of microseconds on each ``draw()``. So a case is one draw of
:data:`DIAL_BYTES` bytes, read as choices by :class:`Dials` (see there for
why shrinking still works).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from hypothesis import event
from hypothesis import strategies as st

from crossattn_sizing.core import admission
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.core.policies import alignment_multiple

from .config_strategies import (
    batched_tokens,
    divisors,
    draw_group,
    draw_interleave,
    encoder_decoder_config,
    kernel_block_sizes,
)

T = TypeVar("T")

LOG2_MAX_LEN = 21
MAX_LEN = 1 << LOG2_MAX_LEN
"""The largest length drawn: 2,097,152 tokens, past the 1M-token contexts engines serve."""
MAX_DRAWN_BLOCK_SIZE = 512
"""The largest block size a capacity case draws (see :data:`LARGE_BLOCK_SIZES`); a config may have up
to :data:`crossattn_sizing.base.limits.MAX_BLOCK_SIZE`."""
MAX_DCP = 8
MAX_REQS = 8

# Block sizes engines use, plus non-powers of two (hybrid models page with
# e.g. 48 or 96), split at 128 where the alignment rules change.
SMALL_BLOCK_SIZES = (16, 1, 8, 32, 48, 64, 96, 128, 3, 24, 80, 112)
LARGE_BLOCK_SIZES = (256, 512, 144, 192, 384, 160, 272, 448)
ALL_BLOCK_SIZES = SMALL_BLOCK_SIZES + LARGE_BLOCK_SIZES
# Lengths people configure: Whisper, BART, Nemotron-Parse pages, powers of two up to 1M contexts.
FAMOUS_LENGTHS = (448, 1024, 1500, 2048, 3201, 3328, 3329, 4096, 8192, 9000, 32768, 65536, 131072,
                  262144, 524288, 1 << 20)
OTHER_KINDS = ((), (GroupKind.FULL,), (GroupKind.SLIDING_WINDOW,), (GroupKind.MAMBA,),
               (GroupKind.FULL, GroupKind.MAMBA), (GroupKind.FULL, GroupKind.SLIDING_WINDOW),
               (GroupKind.SLIDING_WINDOW, GroupKind.MAMBA), (GroupKind.FULL, GroupKind.FULL))

DIAL_BYTES = 48
"""Bytes of one capacity case: a case reads 35 (median), 46 (90th percentile); past the end reads zero.

Hypothesis draws bytes one at a time, so every byte not read is time spent for nothing."""


class Dials:
    """Choices read one after another from a byte string that Hypothesis draws in one go.

    Why not one ``draw()`` per choice: Hypothesis spends tens of microseconds of
    bookkeeping on every draw, and a case has 20 to 40 choices, so per-choice
    draws made a capacity example cost milliseconds. One fixed-size byte string
    is one choice; reading it here is a few microseconds. Shrinking still
    works: Hypothesis lowers bytes toward zero, and every reader below maps
    zero to its simplest option (the first listed, the low end of a range).
    Bytes past the end read as zero.
    """

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        """The next byte of the tape; zeros once it runs out, so a short tape still draws."""
        pos = self.pos
        self.pos += 1
        return self.data[pos] if pos < len(self.data) else 0

    def below(self, n: int) -> int:
        """An integer in ``[0, n)``: one byte for ``n <= 256``, three up to ``2**22``, four above.

        Three bytes span ``2**24``, so below ``2**22`` no value is more than 5/4 as likely
        as another: near enough to uniform for lengths, and a byte cheaper per length.
        """
        if n <= 256:
            return self.byte() % n if n > 1 else 0
        value = self.byte() << 16 | self.byte() << 8 | self.byte()
        if n > 1 << 22:
            value = value << 8 | self.byte()
        return value % n

    def between(self, lo: int, hi: int, label: str | None = None) -> int:
        """An integer in ``[lo, hi]`` (zero bytes give ``lo``); ``label`` is not recorded."""
        return lo + self.below(hi - lo + 1) if hi > lo else lo

    def pick(self, options: Sequence[T], label: str | None = None) -> T:
        """One of ``options`` (zero gives the first)."""
        return options[self.below(len(options))]

    def flag(self, label: str | None = None) -> bool:
        """A coin (zero gives False)."""
        return bool(self.byte() & 1)

    def log_length(self) -> int:
        """A length whose magnitude is uniform on a log scale over ``1 .. MAX_LEN``."""
        e = self.below(LOG2_MAX_LEN)
        return self.between(1 << e, (2 << e) - 1)

    def multiple(self, u: int, min_log2: int = 0) -> int:
        """A multiple ``k * u <= MAX_LEN`` with ``k`` log-uniform from ``2**min_log2`` (where room allows)."""
        top = max(0, (MAX_LEN // u).bit_length() - 1)
        lo = min(min_log2, top)
        e = lo + self.below(top - lo + 1)
        return u * self.between(1 << e, min((2 << e) - 1, MAX_LEN // u))

    def offset(self) -> int:
        """+1, 0 or -1 token around an edge (zero gives +1: one token over, the bug's shape)."""
        return OFFSETS[self.below(3)]

    def edge_length(self, units: tuple[int, ...]) -> int:
        """A multiple of one of ``units`` plus or minus one token (the widest unit first)."""
        return max(1, self.multiple(self.pick(units[::-1])) + self.offset())

    def any_length(self, units: tuple[int, ...]) -> int:
        """A width edge of ``units``, a log-scale length, or a length people configure (a third each)."""
        mode = self.below(3)
        if mode == 0:
            return self.edge_length(units)
        if mode == 1:
            return self.log_length()
        return max(1, self.pick(FAMOUS_LENGTHS) + self.offset())


OFFSETS = (1, 0, -1)


def dials(size: int = DIAL_BYTES) -> st.SearchStrategy[Dials]:
    """A reader over ``size`` drawn bytes."""
    return st.binary(min_size=size, max_size=size).map(Dials)


@functools.cache
def width_units(group: KVCacheGroup, dcp_factor: int) -> tuple[int, ...]:
    """Token spans at whose multiples a group's width changes: entry, block, aligned span (times ``C_g``)."""
    units = {group.kbs * dcp_factor, group.block_size * dcp_factor}
    bs = group.block_size
    units.update(bs * dcp_factor * alignment_multiple(bs, rule) for rule in ("gcd", "pow2"))
    return tuple(sorted(units))


def _kernel_block(d: Dials, bs: int) -> int:
    """Expansion (``kbs < bs``) half the time, from one byte: the low bit says whether, the rest which kbs."""
    choice = d.byte()
    divs = divisors(bs)
    return divs[(choice >> 1) % len(divs)] if choice & 1 else bs


def _expanded_kernel_block(d: Dials, bs: int) -> int:
    """The stress corner's: a kernel block below ``bs`` wherever ``bs`` allows (one byte, as above)."""
    choice = d.byte()
    smaller = kernel_block_sizes(bs)[1:]
    return smaller[choice % len(smaller)] if smaller else bs


def _group(d: Dials, kind: GroupKind, dcp_size: int, sizes: tuple[int, ...], stress: bool) -> KVCacheGroup:
    """One group (see :func:`~properties.config_strategies.draw_group`); in the stress corner with
    kernel-block expansion wherever ``bs`` allows, and replicated beside the cross group under DCP."""
    kernel = _expanded_kernel_block if stress else _kernel_block
    return draw_group(d, kind, sizes, dcp_size, kernel=kernel, replicated=stress)


def _stress_config(d: Dials, max_dcp: int) -> RunnerConfig:
    """Every dial hard at once: ``M`` on an aligned edge at >= 128K tokens, ``E`` one token past it
    (or on it, or one short), ``S`` absent, DCP with a replicated full group, kernel-block expansion."""
    c = d.between(2, max_dcp) if max_dcp > 1 else 1
    groups = [_group(d, k, c, SMALL_BLOCK_SIZES, stress=True) for k in (GroupKind.FULL, GroupKind.CROSS)]
    unit = max(width_units(groups[1], c))
    m = d.multiple(unit, min_log2=max(0, 17 - (unit.bit_length() - 1)))
    e = m + d.offset()
    return _finish(d, groups, c, m, batched_tokens(m, e, d.below(4)), e, None)


def _finish(
    d: Dials, groups: list[KVCacheGroup], c: int, m: int, b: int, e: int | None, s: int | None
) -> RunnerConfig:
    """The config with the dials every cell shares: interleave, rows, and the mamba-only fields."""
    interleave = draw_interleave(d, groups, c)
    max_num_reqs = d.between(1, MAX_REQS)
    mamba = d.byte()  # only mamba widths read these, but a policy may branch on anything
    return encoder_decoder_config(groups, m, b, e, s, (c, interleave), max_num_reqs,
                                  (bool(mamba & 1), (mamba >> 1) % 3))


# Rank of each of (M, E, S) (those present) in each order; the first puts M lowest, E highest.
_PERMUTATIONS = {
    2: ((0, 1), (1, 0)),
    3: ((0, 2, 1), (0, 1, 2), (1, 2, 0), (1, 0, 2), (2, 0, 1), (2, 1, 0)),
}


def _order(d: Dials, values: list[int]) -> list[int]:
    """``values`` sorted, then dealt out in a drawn order, neighbours tied one time in four."""
    ranked = sorted(values)
    tie = d.below(8)  # 1: lowest two equal; 2: highest two equal; else none
    if tie == 1:
        ranked[1] = ranked[0]
    elif tie == 2:
        ranked[-2] = ranked[-1]
    return [ranked[p] for p in d.pick(_PERMUTATIONS[len(ranked)])]


def _generic_config(d: Dials, max_dcp: int) -> RunnerConfig:
    """A cell of the decision table, with lengths on a log scale and on width edges."""
    # S absent (first: the Nemotron-Parse shape) half the time, 0 one time in 16 (a field
    # holding 0 is not the same as no field), a length otherwise.
    s_kind = d.below(16)
    s_present = s_kind >= 8
    e_set = d.flag()
    c = d.between(2, max_dcp) if max_dcp > 1 and d.flag() else 1
    cross = _group(d, GroupKind.CROSS, c, LARGE_BLOCK_SIZES if d.flag() else SMALL_BLOCK_SIZES, stress=False)
    others = [_group(d, kind, c, ALL_BLOCK_SIZES, stress=False) for kind in d.pick(OTHER_KINDS)]
    pos = d.below(len(others) + 1)
    groups = [*others[:pos], cross, *others[pos:]]
    units = width_units(cross, c)
    # M, E (or B, when E defaults to it) and S, in a drawn order.
    m, e, *rest = _order(d, [d.any_length(units) for _ in range(2 + s_present)])
    s = (0 if s_kind == 8 else rest[0]) if s_present else None
    if e_set:
        extra = d.below(3)
        b = batched_tokens(m, e, (0, 1, d.log_length())[extra])  # (the log length is read either way)
        budget: int | None = e
    else:
        m, e = min(m, e), max(m, e)  # B >= M: chunked prefill is off for encoder-decoder models
        b, budget = e, None
    return _finish(d, groups, c, m, b, budget, s)


def read_config(d: Dials, max_dcp: int = MAX_DCP, stress_corner: bool = True) -> tuple[RunnerConfig, bool]:
    """A config from the dials, and whether it is the stress corner (zero bytes: the corner).

    ``stress_corner=False`` leaves the corner out (the meta-tests use it to show
    that the decision table alone catches each broken policy).
    """
    stress = d.below(8) == 0 and stress_corner
    return (_stress_config(d, max_dcp) if stress else _generic_config(d, max_dcp)), stress


def runner_configs(max_dcp: int = MAX_DCP) -> st.SearchStrategy[RunnerConfig]:
    """Encoder-decoder configs the engine would start with (the stress corner first, see the module doc)."""

    def build(d: Dials) -> RunnerConfig:
        config, stress = read_config(d, max_dcp)
        record_config_events(config, stress)
        return config

    return dials().map(build)


def decision_cell(config: RunnerConfig) -> str:
    """The cell of the inputs' decision table a config falls in: field presence and the order of lengths."""
    named = [("M", config.max_model_len),
             ("E" if config.max_num_encoder_input_tokens else "E=B", config.encoder_budget)]
    if config.max_source_positions is not None:
        named.append(("S", config.max_source_positions))
    named.sort(key=lambda kv: kv[1])
    order = named[0][0]
    for (_, prev), (name, value) in itertools.pairwise(named):
        order += ("=" if value == prev else "<") + name
    s = "S absent" if config.max_source_positions is None else (
        "S=0" if config.max_source_positions == 0 else "S present")
    return f"{s}, {order}"


def record_config_events(config: RunnerConfig, stress: bool = False) -> None:
    """Name the decision-table cell and regimes a config falls in, so a run's statistics show coverage."""
    if stress:
        event("stress corner")
    event(f"cell: {decision_cell(config)}")
    # Each dimension on its own too, so summaries (fuzz, --hypothesis-show-statistics) add up.
    event("S absent" if config.max_source_positions is None else "S present")
    event("E set" if config.max_num_encoder_input_tokens is not None else "E defaults to B")
    event("DCP on" if config.dcp_size > 1 else "DCP off")
    cross = config.groups[config.cross_groups()[0]]
    event("cross block size <= 128" if cross.block_size <= 128 else "cross block size > 128")
    event("groups: cross" + "".join(sorted(f"+{g.kind.value}" for g in config.groups
                                           if g.kind is not GroupKind.CROSS)))
    if config.dcp_size > 1 and any(not g.dcp_sharded for g in config.groups if g.kind.is_attention):
        event("replicated group under DCP")
    if any(g.bpk > 1 for g in config.groups):
        event("kernel expansion (bpk > 1)")
    top = max(config.max_model_len, config.encoder_budget, config.source_positions)
    event(f"longest length in 2^{top.bit_length() - 1}..2^{top.bit_length()}")


def read_encoder_length(d: Dials, config: RunnerConfig) -> int:
    """An admitted encoder length: the bound (zero bytes), one less, a width edge below it, or any.

    The edges are where off-by-one sizing fails: a length that exactly fills
    an entry, block or aligned span, and one token more.
    """
    bound = admission.encoder_bound(config)
    cross = config.groups[config.cross_groups()[0]]
    mode = d.below(4)
    if mode == 0:
        return bound
    if mode == 1:
        return max(1, bound - 1)
    if mode == 2:  # a multiple of a unit, among the last three at or below the bound, plus one or exact
        u = d.pick(width_units(cross, config.dcp_factor(cross)))
        k = max(1, bound // u - d.below(3))
        return min(bound, max(1, k * u + d.offset()))
    return d.between(1, bound)


def encoder_lengths(config: RunnerConfig) -> st.SearchStrategy[int]:
    """One admitted encoder length of ``config`` (see :func:`read_encoder_length`)."""
    return dials(8).map(lambda d: _length_event(read_encoder_length(d, config), config))


def _length_event(e: int, config: RunnerConfig) -> int:
    per_entry = admission.tokens_per_entry(config, config.groups[config.cross_groups()[0]])
    if e % per_entry == 0:
        event("encoder length on an entry edge")
    elif e % per_entry == 1:
        event("encoder length one token over an entry edge")
    if e == admission.encoder_bound(config):
        event("encoder length at the admitted bound")
    return e


@dataclass(frozen=True)
class CapacityCase:
    """A config and the encoder lengths of one batch of admitted requests."""

    config: RunnerConfig
    encoder_lens: tuple[int, ...]


def read_case(d: Dials, max_dcp: int = MAX_DCP, stress_corner: bool = True) -> tuple[CapacityCase, bool]:
    """A case from the dials, and whether its config is the stress corner."""
    config, stress = read_config(d, max_dcp, stress_corner)
    n = d.between(1, config.max_num_reqs)
    return CapacityCase(config, tuple(read_encoder_length(d, config) for _ in range(n))), stress


def capacity_cases(max_dcp: int = MAX_DCP, stress_corner: bool = True) -> st.SearchStrategy[CapacityCase]:
    """A config and a batch of admitted requests, from one draw of :data:`DIAL_BYTES` bytes."""

    def build(d: Dials) -> CapacityCase:
        case, stress = read_case(d, max_dcp, stress_corner)
        record_config_events(case.config, stress)
        _length_event(max(case.encoder_lens), case.config)  # the longest request is the one that overflows
        return case

    return dials().map(build)
