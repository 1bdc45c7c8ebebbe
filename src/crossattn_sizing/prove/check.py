"""Exhaustive check of the cross-attention coverage invariant over a bounded config domain.

Why: property tests sample configs, and a sizing bug like the one PR #46753 fixed
lives on a thin slice (``e > M`` with ``S`` absent) that sampling can miss. Over
a bounded domain every config can be checked; numpy makes that cheap enough
(over 10**8 configs a second on one core) that "holds" means "holds on every
config listed", not "no sample failed".

The domain is the product of

* group shapes ``(bs, kbs, C, I)``: every block size listed, every kernel block
  size dividing it (or those listed), every DCP size listed and, for ``C > 1``,
  every interleave ``I`` dividing ``kbs`` (the rule :class:`RunnerConfig`
  enforces). For ``C == 1`` the engine ignores ``I``, so ``I = 1`` stands for
  all of them and is counted once;
* lengths ``(M, E, S)``: the listed ``max_model_len``, encoder budget and
  ``max_source_positions`` values, ``S`` possibly absent (:data:`ABSENT`).

``B = max(M, E)``: the engine requires ``B >= M`` (chunked prefill is off for
encoder-decoder models) and admits ``e = min(E, B)`` encoder tokens, so this is
the smallest ``B`` it starts with that admits all of ``E``; then ``e = E``.

Per config, one DCP-sharded cross-attention group (the layout
:mod:`crossattn_sizing.admission` models) must satisfy coverage
``cdiv(e, kbs*C) <= W`` and allocation fit ``cdiv(e, bs*C) * bpk <= W``, ``W``
being the policy's row width in entries. Configs are ordered canonically by
``(bs, kbs, C, I, M, E, S)`` with ``S`` absent first; counterexamples are
reported in that order whatever order the chunks were evaluated in.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from crossattn_sizing import admission, capacity, usercode
from crossattn_sizing.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.errors import HarnessError, NotExpressible, PolicyCallError
from crossattn_sizing.limits import MAX_BLOCK_SIZE, MAX_INT_DIGITS, too_long
from crossattn_sizing.policies import Alignment, Length, Policy, SizingPolicy, checked_widths, policy_name

ABSENT = -1
"""``max_source_positions`` absent from the model config (sorts before 0)."""

MAX_LENGTH = 2**31 - 1
MAX_DCP = 2**10
MAX_AXIS_VALUES = 2**24
MAX_GROUP_ROWS = 2**24
DEFAULT_CHUNK_SIZE = 2**21
TILE = 2**15
"""Configs evaluated per numpy pass: small enough that the temporaries stay in cache."""


class DomainError(HarnessError, ValueError):
    """A domain option that cannot be enumerated; the message names the option and the rule."""


class PolicyRaised(Exception):
    """The policy raised on one config of the domain (a worker that died included); prove stops there.

    Not a :class:`HarnessError`: the policy failed on a config it was asked
    about, which is a verdict (that config has no widths), not bad input.
    """

    def __init__(self, config: RunnerConfig, error: Exception) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.config = config
        self.error = error


Answer = tuple[int, ...] | Exception
"""One config's answer from a batch: its widths, or what asking about it raised."""

BatchWidths = Callable[[Sequence[RunnerConfig]], list[Answer]]
"""A policy's optional ``widths_many(configs)``: one :data:`Answer` per config, in order.

The list may end right after an exception (the configs after it were not
asked). What it answers must be what calling the policy on each config
would; prove uses it when present, so a policy behind a process boundary
(``vllm==X``) pays one round trip per batch instead of one per config. An
optional ``end_batches()`` is called when :func:`prove_all` is done.
"""


# ---------------------------------------------------------------- domain options

_ITEM = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?")


def parse_values(
    text: str, option: str, *, minimum: int, maximum: int, allow_absent: bool = False
) -> np.ndarray:
    """The sorted distinct values of a list like ``absent,0-2048:16,3000``.

    Items are ``N``, ``LO-HI`` (inclusive) or ``LO-HI:STEP`` (``LO``, ``LO+STEP``,
    ... up to ``HI``). ``absent`` (only where ``allow_absent``) becomes
    :data:`ABSENT`. Any other text raises :class:`DomainError` naming ``option``.
    """
    parts: list[np.ndarray] = []
    for raw in text.split(","):
        item = raw.strip()
        if item.lower() == "absent":
            if not allow_absent:
                raise DomainError(f"{option} {text!r}: 'absent' is only allowed for --source-positions")
            parts.append(np.array([ABSENT], dtype=np.int64))
            continue
        match = _ITEM.fullmatch(item)
        if match is not None and any(too_long(n) for n in match.groups() if n):
            raise DomainError(f"{option} {item[:40]!r}...: numbers may have at most {MAX_INT_DIGITS} digits")
        if match is None:
            raise DomainError(
                f"{option} {text!r}: item {item!r} is not N, LO-HI or LO-HI:STEP "
                "(non-negative integers, comma-separated)"
            )
        lo = int(match[1])
        hi = int(match[2]) if match[2] else lo
        step = int(match[3]) if match[3] else 1
        if lo > hi:
            raise DomainError(f"{option} {item!r}: start {lo} is greater than end {hi}")
        if step < 1:
            raise DomainError(f"{option} {item!r}: step must be >= 1")
        if lo < minimum or hi > maximum:
            raise DomainError(f"{option} {item!r}: values must lie in {minimum}..{maximum}")
        if (hi - lo) // step + 1 > MAX_AXIS_VALUES:
            raise DomainError(
                f"{option} {item!r}: more than {MAX_AXIS_VALUES} values on one axis; use a step"
            )
        parts.append(np.arange(lo, hi + 1, step, dtype=np.int64))
    values = np.sort(np.concatenate(parts))  # np.unique hashes first: ~10x slower on 10**6 values
    values = values[np.concatenate(([True], values[1:] != values[:-1]))]
    if values.size > MAX_AXIS_VALUES:
        raise DomainError(f"{option} {text!r}: more than {MAX_AXIS_VALUES} values on one axis; use a step")
    return values


class GroupTable(NamedTuple):
    """Group shapes ``(bs, kbs, C, I)`` as parallel arrays, in canonical order."""

    block_size: np.ndarray
    kernel_block_size: np.ndarray
    dcp: np.ndarray
    interleave: np.ndarray


def _divisor_table(n_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Divisors of every ``n <= n_max`` in CSR form: ``divs[offsets[n]:offsets[n+1]]``, ascending.

    A sieve over multiples costs ``n_max * ln(n_max)``, not the ``n_max**2`` of trial division.
    """
    ns, ds = [], []
    for d in range(1, n_max + 1):
        multiples = np.arange(d, n_max + 1, d, dtype=np.int64)
        ns.append(multiples)
        ds.append(np.full(multiples.size, d, dtype=np.int64))
    n, d = np.concatenate(ns), np.concatenate(ds)
    offsets = np.zeros(n_max + 2, dtype=np.int64)
    offsets[1:] = np.cumsum(np.bincount(n, minlength=n_max + 1))
    return offsets, d[np.lexsort((d, n))]


def _expand_divisors(
    keys: np.ndarray, offsets: np.ndarray, divs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each key, one row per divisor: ``(index of the key, divisor)``, keys in order."""
    counts = offsets[keys + 1] - offsets[keys]
    owner = np.repeat(np.arange(keys.size), counts)
    within = np.arange(owner.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return owner, divs[offsets[keys][owner] + within]


def group_table(
    block_sizes: np.ndarray,
    dcp_sizes: np.ndarray,
    kernel_block_sizes: np.ndarray | None,
    limit: int = MAX_GROUP_ROWS,
) -> GroupTable:
    """Every valid ``(bs, kbs, C, I)``, sorted lexicographically.

    ``kbs`` ranges over the divisors of ``bs`` (restricted to ``kernel_block_sizes``
    when given); ``I`` over the divisors of ``kbs`` when ``C > 1`` (which also
    divide ``bs``), and is 1 when ``C == 1``. The rows are counted before they
    are built: more than ``limit`` raises :class:`DomainError` instead of
    exhausting memory.
    """
    offsets, divs = _divisor_table(int(block_sizes.max()))
    owner, kbs = _expand_divisors(block_sizes, offsets, divs)
    bs = block_sizes[owner]
    if kernel_block_sizes is not None:
        keep = np.isin(kbs, kernel_block_sizes)
        bs, kbs = bs[keep], kbs[keep]
    sharded = int(np.count_nonzero(dcp_sizes > 1))
    rows = bs.size * (dcp_sizes.size - sharded) + sharded * int((offsets[kbs + 1] - offsets[kbs]).sum())
    if rows > limit:
        raise DomainError(
            f"--block-sizes/--dcp: {rows} group shapes (bs, kbs, C, I) exceed {limit}; "
            "narrow --block-sizes, --kernel-block-sizes or --dcp"
        )
    cols: list[tuple[np.ndarray, ...]] = []
    for c in dcp_sizes.tolist():
        if c == 1:
            ones = np.ones_like(bs)
            cols.append((bs, kbs, ones, ones))
        else:
            owner, inter = _expand_divisors(kbs, offsets, divs)
            cols.append((bs[owner], kbs[owner], np.full(owner.size, c, dtype=np.int64), inter))
    bs, kbs, dcp, inter = (np.concatenate(parts) for parts in zip(*cols, strict=True))
    order = np.lexsort((inter, dcp, kbs, bs))
    return GroupTable(bs[order], kbs[order], dcp[order], inter[order])


@dataclass(frozen=True, eq=False)
class Domain:
    """A bounded config domain; its size is counted, never materialised.

    ``specs`` keeps the option texts it was parsed from, for reports.
    """

    block_sizes: np.ndarray
    dcp_sizes: np.ndarray
    max_model_lens: np.ndarray
    encoder_tokens: np.ndarray
    source_positions: np.ndarray
    kernel_block_sizes: np.ndarray | None = None
    specs: dict[str, str] = dataclasses.field(default_factory=dict)
    shapes: GroupTable | None = None
    """Group shapes listed outright (valid, canonical order) instead of every one the axes allow."""

    @classmethod
    def parse(
        cls,
        *,
        block_sizes: str = "1-512",
        kernel_block_sizes: str = "all",
        dcp: str = "1",
        max_model_len: str,
        encoder_tokens: str,
        source_positions: str,
    ) -> Domain:
        """A domain from the CLI's option texts; bad text raises :class:`DomainError`."""
        kbs = (
            None
            if kernel_block_sizes.strip().lower() == "all"
            else parse_values(kernel_block_sizes, "--kernel-block-sizes", minimum=1, maximum=MAX_BLOCK_SIZE)
        )
        domain = cls(
            block_sizes=parse_values(block_sizes, "--block-sizes", minimum=1, maximum=MAX_BLOCK_SIZE),
            dcp_sizes=parse_values(dcp, "--dcp", minimum=1, maximum=MAX_DCP),
            max_model_lens=parse_values(max_model_len, "--max-model-len", minimum=1, maximum=MAX_LENGTH),
            encoder_tokens=parse_values(encoder_tokens, "--encoder-tokens", minimum=1, maximum=MAX_LENGTH),
            source_positions=parse_values(
                source_positions, "--source-positions", minimum=0, maximum=MAX_LENGTH, allow_absent=True
            ),
            kernel_block_sizes=kbs,
            specs={
                "block_sizes": block_sizes,
                "kernel_block_sizes": kernel_block_sizes,
                "dcp": dcp,
                "max_model_len": max_model_len,
                "encoder_tokens": encoder_tokens,
                "source_positions": source_positions,
            },
        )
        if domain.groups.block_size.size == 0:
            raise DomainError(
                f"--kernel-block-sizes {kernel_block_sizes!r}: no listed kernel block size divides "
                f"any of --block-sizes {block_sizes!r}"
            )
        return domain

    @functools.cached_property
    def groups(self) -> GroupTable:
        """The ``(bs, kbs, C, I)`` shapes (a few thousand rows for bs 1..512, C = 1)."""
        if self.shapes is not None:
            return self.shapes
        return group_table(self.block_sizes, self.dcp_sizes, self.kernel_block_sizes)

    @property
    def length_shape(self) -> tuple[int, int, int]:
        """Axis lengths of ``(M, E, S)``, row-major in that order."""
        return (self.max_model_lens.size, self.encoder_tokens.size, self.source_positions.size)

    @property
    def num_lengths(self) -> int:
        m, e, s = self.length_shape
        return m * e * s

    @property
    def size(self) -> int:
        """How many configs the domain holds (a Python int: it may exceed int64)."""
        return int(self.groups.block_size.size) * self.num_lengths

    def lengths(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(M, E, S)`` for canonical length indices ``[start, stop)``."""
        _, n_e, n_s = self.length_shape
        idx = np.arange(start, stop, dtype=np.int64)
        mi, rest = np.divmod(idx, n_e * n_s)
        ei, si = np.divmod(rest, n_s)
        return self.max_model_lens[mi], self.encoder_tokens[ei], self.source_positions[si]

    def config(self, g: int, j: int) -> RunnerConfig:
        """The engine config at group row ``g`` and length index ``j``."""
        t = self.groups
        m, e, s = (int(a[0]) for a in self.lengths(j, j + 1))
        group = KVCacheGroup(GroupKind.CROSS, int(t.block_size[g]), int(t.kernel_block_size[g]))
        return RunnerConfig(
            max_model_len=m,
            max_num_batched_tokens=max(m, e),
            groups=(group,),
            max_num_encoder_input_tokens=e,
            max_source_positions=None if s == ABSENT else s,
            dcp_size=int(t.dcp[g]),
            dcp_interleave=int(t.interleave[g]),
        )

    def describe(self) -> dict[str, str]:
        """One human line per axis: how many values and their span."""

        def span(values: np.ndarray) -> str:
            shown = ["absent" if v == ABSENT else str(v) for v in values[:1].tolist() + values[-1:].tolist()]
            return f"{values.size} value{'s' * (values.size != 1)} in {shown[0]}..{shown[-1]}"

        kbs = (
            "every divisor of bs"
            if self.kernel_block_sizes is None
            else (f"divisors of bs among {span(self.kernel_block_sizes)}")
        )
        return {
            "bs": span(self.block_sizes),
            "kbs": kbs,
            "C": span(self.dcp_sizes),
            "I": "every divisor of kbs when C > 1, 1 when C = 1",
            "M": span(self.max_model_lens),
            "E": span(self.encoder_tokens),
            "S": span(self.source_positions),
            "B": "max(M, E): the smallest B the engine accepts that admits E, so e = E",
        }


# ---------------------------------------------------------------- vectorised widths


def vector_length(length: Length, m: np.ndarray, e_budget: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``L`` of :func:`policies.sizing_length` for encoder-decoder configs; ``s`` may be :data:`ABSENT`."""
    s0 = np.maximum(s, 0)
    if length == "fixed":
        return np.maximum(np.maximum(m, e_budget), s0)
    if length == "prefix":
        return np.maximum(m, s0)
    if length == "v1":
        return np.maximum(m, e_budget)
    raise ValueError(f"unknown length rule {length!r}")


def alignment_multiples(block_size: np.ndarray, alignment: Alignment) -> np.ndarray:
    """:func:`policies.alignment_multiple` element-wise."""
    bs = np.asarray(block_size, dtype=np.int64)
    if alignment == "none":
        return np.ones_like(bs)
    if alignment == "pow2":
        return np.where(bs <= 128, 128 // bs, 1)
    if alignment == "gcd":
        return 128 // np.gcd(128, bs)
    raise ValueError(f"unknown alignment rule {alignment!r}")


def _cdiv(a: Any, b: Any) -> Any:
    return -((-a) // b)


def row_entries(
    big_l: np.ndarray, bs: np.ndarray, kbs: np.ndarray, dcp: np.ndarray, alignment: Alignment
) -> np.ndarray:
    """A cross row's width in entries: ``align(cdiv(L, bs*C), a) * bpk``.

    Written as ``cdiv(L, bs*C*a) * a * bpk`` (``cdiv(cdiv(x, m), n) == cdiv(x, m*n)``),
    one division instead of two, which is what :func:`prove` evaluates.
    """
    a = alignment_multiples(bs, alignment)
    return _cdiv(big_l, bs * dcp * a) * (a * (bs // kbs))


def vector_widths(
    length: Length,
    alignment: Alignment,
    bs: np.ndarray,
    kbs: np.ndarray,
    dcp: np.ndarray,
    m: np.ndarray,
    e_budget: np.ndarray,
    s: np.ndarray,
) -> np.ndarray:
    """:func:`policies.widths` of one DCP-sharded cross group, over broadcast arrays."""
    return row_entries(vector_length(length, m, e_budget, s), bs, kbs, dcp, alignment)


def vector_form(policy: Policy) -> tuple[Length, Alignment] | None:
    """``(length, alignment)`` when ``policy`` is a plain :class:`SizingPolicy`, else None.

    A subclass that overrides ``__call__`` is not trusted to match its fields.
    """
    if not isinstance(policy, SizingPolicy) or type(policy).__call__ is not SizingPolicy.__call__:
        return None
    if policy.length not in ("fixed", "prefix", "v1") or policy.alignment not in ("none", "pow2", "gcd"):
        return None  # a rule this mirror does not know: let the policy answer for itself
    return policy.length, policy.alignment


# ---------------------------------------------------------------- the check


@dataclass(frozen=True)
class Counterexample:
    """One config where the row is too narrow, with the numbers the scalar check gives."""

    block_size: int
    kernel_block_size: int
    dcp_size: int
    dcp_interleave: int
    max_model_len: int
    max_num_encoder_input_tokens: int
    max_source_positions: int | None
    max_num_batched_tokens: int
    encoder_tokens: int
    entries_needed: int
    entries_allocated: int
    entries_given: int


@dataclass(frozen=True)
class ProveResult:
    """What :func:`prove` found; ``counterexamples`` are the first few in canonical order."""

    policy: str
    vectorised: bool
    configs: int
    failures: int
    counterexamples: list[Counterexample]
    seconds: float
    batched: bool = False
    """Asked through the policy's ``widths_many`` (:data:`BatchWidths`), a tile per call."""
    not_judged: int = 0
    """Configs the policy could not be asked about (:class:`NotExpressible`): no verdict either way."""

    @property
    def judged(self) -> int:
        """Configs with a verdict: the domain less those the policy could not be asked about."""
        return self.configs - self.not_judged

    @property
    def holds(self) -> bool:
        """No failure on any judged config; a result that judged nothing does not hold (nor fail)."""
        return self.failures == 0 and self.judged > 0

    @property
    def method(self) -> str:
        """How the widths were obtained, for reports."""
        if self.vectorised:
            return "vectorised"
        return "batched calls (widths_many)" if self.batched else "one call per config"

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "vectorised": self.vectorised,
            "batched": self.batched,
            "configs_checked": self.configs,
            "configs_not_judged": self.not_judged,
            "holds": self.holds,
            "counterexamples_total": self.failures,
            "counterexamples": [dataclasses.asdict(c) for c in self.counterexamples],
            "seconds": self.seconds,
        }


def scalar_check(policy: Policy, config: RunnerConfig) -> Counterexample | None:
    """The invariant for one config through the scalar code (:mod:`admission`, the policy itself)."""
    group = config.groups[0]
    given = checked_widths(policy, config)[0]
    e = admission.encoder_bound(config)
    needed, allocated = need = capacity.demand(config, group, e)
    if not need.overflows(given):
        return None
    return Counterexample(
        group.block_size, group.kbs, config.dcp_size, config.dcp_interleave, config.max_model_len,
        config.encoder_budget, config.max_source_positions, config.max_num_batched_tokens,
        e, needed, allocated, given,
    )  # fmt: skip


class _Lengths(NamedTuple):
    """Per-length-index quantities as ``(1, n)`` rows, negated for ceil-by-floor division."""

    neg_l: np.ndarray
    neg_e: np.ndarray


class _Groups(NamedTuple):
    """Per-group quantities as ``(k, 1)`` columns."""

    span: np.ndarray  # bs * C * a: tokens per aligned unit of the width formula
    per: np.ndarray  # a * bpk: entries per such unit
    kbs_c: np.ndarray
    bs_c: np.ndarray
    bpk: np.ndarray


def _vector_mask(g: _Groups, ln: _Lengths) -> np.ndarray:
    """Failing configs of a ``(k, n)`` tile, all in negated form (``-cdiv(x, d) == (-x) // d``).

    ``ng = -W``, ``nn = -needed``, ``na = -allocated``; ``needed > W`` iff ``nn < ng``.
    A row divided by a column is numpy's fast scalar-divisor path per row.
    """
    ng = ln.neg_l // g.span
    ng *= g.per
    return capacity.overflows_negated(ng, ln.neg_e, g.kbs_c, g.bs_c, g.bpk)


def _tiles(n_groups: int, n_lengths: int, chunk_size: int) -> Iterator[tuple[int, int, int, int]]:
    """``(g0, g1, j0, j1)`` tiles covering the product, length chunks outermost.

    Length quantities are decoded once per length chunk and reused for every
    group, so the outer loop runs over lengths; canonical order is restored when
    counterexamples are merged.
    """
    chunk = min(n_lengths, max(1, chunk_size))
    for c0 in range(0, n_lengths, chunk):
        c1 = min(c0 + chunk, n_lengths)
        width = c1 - c0
        rows = max(1, TILE // width)
        for g0 in range(0, n_groups, rows):
            g1 = min(g0 + rows, n_groups)
            for j0 in range(c0, c1, TILE):
                yield g0, g1, j0, min(j0 + TILE, c1)


class _Collector:
    """Keeps the first ``limit`` failing ``(g, j)`` in canonical order and counts all of them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.failures = 0
        self.keys: list[tuple[int, int]] = []

    def add(self, mask: np.ndarray, g0: int, j0: int) -> None:
        count = int(np.count_nonzero(mask))
        if not count:
            return
        self.failures += count
        if self.limit <= 0 or (len(self.keys) >= self.limit and (g0, j0) > self.keys[-1]):
            return
        rows, cols = np.nonzero(mask)
        new = list(zip((rows[: self.limit] + g0).tolist(), (cols[: self.limit] + j0).tolist(), strict=True))
        self.keys = sorted(self.keys + new)[: self.limit]


def _spot_check(domain: Domain, policy: Policy, form: tuple[Length, Alignment], samples: int = 64) -> None:
    """Compare the vectorised widths with the policy's own on a few configs of this domain.

    The unit tests already pin the two together; this guards a run against drift
    anyway, at the cost of a few scalar calls.
    """
    rng = np.random.default_rng(0)
    t = domain.groups
    gs = rng.integers(0, t.block_size.size, samples)
    js = rng.integers(0, domain.num_lengths, samples)
    for g, j in zip(gs.tolist(), js.tolist(), strict=True):
        config = domain.config(g, j)
        m, e, s = (np.int64(a[0]) for a in domain.lengths(j, j + 1))
        fast = vector_widths(*form, t.block_size[g], t.kernel_block_size[g], t.dcp[g], m, e, s)
        slow = checked_widths(policy, config)[0]
        if int(fast) != slow:
            raise AssertionError(
                f"vectorised width {int(fast)} != policy width {slow} at {config.describe()}"
            )


def prove(
    domain: Domain,
    policy: Policy,
    *,
    examples: int = 5,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    progress: Callable[[int], None] | None = None,
) -> ProveResult:
    """Check the coverage and allocation invariants on every config of ``domain``.

    Built-in-style policies (:func:`vector_form`) are evaluated with numpy; one
    with a ``widths_many`` method (:data:`BatchWidths`) is asked a tile of
    configs at a time; any other callable is called once per config (slow;
    ``progress`` is how a caller shows it). ``progress`` receives the number of
    configs just checked. Counterexamples are recomputed through
    :func:`scalar_check`, so what is reported is what the scalar definitions
    say. A policy that raises on a config stops the check with
    :class:`PolicyRaised` naming that config (a :class:`HarnessError` it raises
    passes through as it is).
    """
    start = time.perf_counter()
    form = vector_form(policy)
    t = domain.groups
    if form is not None:
        _spot_check(domain, policy, form)
    a = alignment_multiples(t.block_size, form[1] if form is not None else "none")
    bpk = t.block_size // t.kernel_block_size
    cols = _Groups(
        span=t.block_size * t.dcp * a,
        per=a * bpk,
        kbs_c=t.kernel_block_size * t.dcp,
        bs_c=t.block_size * t.dcp,
        bpk=bpk,
    )
    collector = _Collector(examples)
    not_judged = 0
    cached: tuple[int, _Lengths] | None = None  # (chunk start, its rows)
    chunk = min(domain.num_lengths, max(1, chunk_size))
    for g0, g1, j0, j1 in _tiles(t.block_size.size, domain.num_lengths, chunk_size):
        c0 = j0 - j0 % chunk
        if cached is None or cached[0] != c0:
            m, e_budget, s = domain.lengths(c0, min(c0 + chunk, domain.num_lengths))
            e = np.minimum(e_budget, np.maximum(m, e_budget))  # min(E, B) with B = max(M, E)
            big_l = vector_length(form[0] if form is not None else "fixed", m, e_budget, s)
            cached = (c0, _Lengths(-big_l[None, :], -e[None, :]))
        ln = cached[1]
        tile = _Lengths(ln.neg_l[:, j0 - c0 : j1 - c0], ln.neg_e[:, j0 - c0 : j1 - c0])
        group_cols = _Groups(*(col[g0:g1, None] for col in cols))
        if form is None:
            widths, unasked = _policy_widths(domain, policy, g0, g1, j0, j1)
            mask = _width_mask(widths, group_cols, tile.neg_e) & ~unasked
            not_judged += int(unasked.sum())
        else:
            mask = _vector_mask(group_cols, tile)
        collector.add(mask, g0, j0)
        if progress is not None:
            progress((g1 - g0) * (j1 - j0))
    found = []
    for g, j in collector.keys:
        config = domain.config(g, j)
        example = scalar_check(policy, config)
        if example is None:
            raise AssertionError(f"vectorised check fails but scalar holds at {config.describe()}")
        found.append(example)
    return ProveResult(
        policy=policy_name(policy),
        vectorised=form is not None,
        batched=form is None and batch_method(policy) is not None,
        configs=domain.size,
        failures=collector.failures,
        counterexamples=found,
        seconds=time.perf_counter() - start,
        not_judged=not_judged,
    )


def prove_all(
    domains: list[Domain],
    policy: Policy,
    *,
    examples: int = 5,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    progress: Callable[[int], None] | None = None,
) -> ProveResult:
    """:func:`prove` over a union of domains (the edge domain's parts), as one result.

    Counts add up; counterexamples are the first ``examples`` in part order,
    canonical order within a part. A batch policy's ``end_batches()``, when it
    has one, is called at the end (an engine policy ends the extra processes
    it started for the batches, so a verify over many releases does not keep
    them all).
    """
    start = time.perf_counter()
    try:
        results = [
            prove(d, policy, examples=examples, chunk_size=chunk_size, progress=progress) for d in domains
        ]
    finally:
        end = getattr(policy, "end_batches", None)
        if batch_method(policy) is not None and callable(end):
            end()
    found = [c for r in results for c in r.counterexamples][:examples]
    return ProveResult(
        policy=policy_name(policy),
        vectorised=all(r.vectorised for r in results),
        batched=any(r.batched for r in results),
        configs=sum(r.configs for r in results),
        failures=sum(r.failures for r in results),
        counterexamples=found,
        seconds=time.perf_counter() - start,
        not_judged=sum(r.not_judged for r in results),
    )


def batch_method(policy: Policy) -> BatchWidths | None:
    """The policy's ``widths_many`` when it has one (:data:`BatchWidths`), else None."""
    many = getattr(policy, "widths_many", None)
    return many if callable(many) else None


def _tile_configs(domain: Domain, g0: int, g1: int, j0: int, j1: int) -> list[RunnerConfig]:
    """The configs of a tile, group rows outer, length indices inner.

    The first config of each group row is built and validated as usual, and
    the rest copy its fields with ``M``, ``B``, ``E`` and ``S`` changed (the
    domain only holds valid configs, so validating each again proves nothing
    and took half the time of a cheap policy's call).
    """
    m, e, s = domain.lengths(j0, j1)
    lengths = list(zip(m.tolist(), e.tolist(), s.tolist(), strict=True))
    new = object.__new__
    out = []
    for g in range(g0, g1):
        fields = dict(domain.config(g, j0).__dict__)
        for mi, ei, si in lengths:
            fields["max_model_len"] = mi
            fields["max_num_batched_tokens"] = mi if mi > ei else ei
            fields["max_num_encoder_input_tokens"] = ei
            fields["max_source_positions"] = None if si == ABSENT else si
            config = new(RunnerConfig)
            config.__dict__.update(fields)
            out.append(config)
    return out


def _answers(policy: Policy, configs: list[RunnerConfig]) -> Iterable[Answer]:
    """Each config's answer: through ``widths_many`` when the policy has it, else one call each.

    A single call that raises (or answers nonsense) stops here with a
    :class:`PolicyRaised` holding the :class:`PolicyCallError`; a batch's
    exception is its item.
    """
    many = batch_method(policy)
    if many is not None:
        yield from usercode.call(lambda: list(many(configs)), what=f"sizing policy {policy_name(policy)}: "
                                 "widths_many", passthrough=(HarnessError,))  # fmt: skip
        return
    for config in configs:
        try:
            # The user-code boundary: whatever the policy raises or does to its config is a
            # PolicyCallError naming the config (bad input), which stops prove.
            yield checked_widths(policy, config)
        except NotExpressible as exc:  # no answer for this config: its item, not a stop
            yield exc
        except PolicyCallError as exc:  # prove stops at this config, and says which
            raise PolicyRaised(config, exc) from None


def _policy_widths(
    domain: Domain, policy: Policy, g0: int, g1: int, j0: int, j1: int
) -> tuple[np.ndarray, np.ndarray]:
    """The policy's cross width for every config of a tile (:func:`_tile_configs`, :func:`_answers`).

    What it costs is the policy's own time. An answer that is not a 1-tuple
    of a non-negative int goes through :func:`checked_widths`, which accepts
    any sequence and names a bad one. The second array marks the configs the
    policy could not be asked about (:class:`NotExpressible`): not judged.
    """
    configs = _tile_configs(domain, g0, g1, j0, j1)
    out = np.empty(len(configs), dtype=np.int64)
    unasked = np.zeros(len(configs), dtype=bool)
    done = 0
    answers = iter(_answers(policy, configs))
    for config, w in zip(configs, answers, strict=False):
        if isinstance(w, NotExpressible):
            out[done], unasked[done] = 0, True
            done += 1
            continue
        if isinstance(w, Exception):
            if isinstance(w, HarnessError):
                raise w
            raise PolicyRaised(config, w) from w
        if type(w) is tuple and len(w) == 1 and type(w[0]) is int and w[0] >= 0:
            out[done] = w[0]
        else:
            out[done] = checked_widths(policy, config)[0]
        done += 1
    if done != len(configs) or next(answers, None) is not None:
        raise PolicyCallError(
            f"sizing policy {policy_name(policy)}: widths_many did not answer each of its {len(configs)} "
            "configs exactly once (expected one answer per config, in order)"
        )
    shape = (g1 - g0, j1 - j0)
    return out.reshape(shape), unasked.reshape(shape)


def _width_mask(widths: np.ndarray, g: _Groups, neg_e: np.ndarray) -> np.ndarray:
    """Failing configs given the widths: ``needed > W`` or ``allocated > W`` (capacity's negated form)."""
    return capacity.overflows_negated(-widths, neg_e, g.kbs_c, g.bs_c, g.bpk)
