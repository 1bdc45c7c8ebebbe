"""Exhaustive check of the cross-attention coverage invariant over a bounded config domain.

Why: property tests sample configs, and a sizing bug like the one PR #46753 fixed
lives on a thin slice (``e > M`` with ``S`` absent) that sampling can miss. Over
a bounded domain (:mod:`crossattn_sizing.prove.domain`) every config can be
checked; numpy makes that cheap enough (over 10**8 configs a second on one
core) that "holds" means "holds on every config listed", not "no sample failed".

Per config, one DCP-sharded cross-attention group (the layout
:mod:`crossattn_sizing.core.admission` models) must satisfy coverage
``cdiv(e, kbs*C) <= W`` and allocation fit ``cdiv(e, bs*C) * bpk <= W``, ``W``
being the policy's row width in entries: from the numpy form
(:mod:`~crossattn_sizing.prove.vectors`) where the policy has one, else asked
of the policy (:mod:`~crossattn_sizing.prove.batches`). Counterexamples are
reported in the domain's canonical order whatever order the tiles were
evaluated in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np

from crossattn_sizing.core import admission, capacity
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.policies import Alignment, Length, Policy, checked_widths, policy_name
from crossattn_sizing.prove.batches import batch_method, policy_widths
from crossattn_sizing.prove.counterexamples import Counterexample, ProveResult
from crossattn_sizing.prove.domain import Domain
from crossattn_sizing.prove.vectors import alignment_multiples, vector_form, vector_length, vector_widths

DEFAULT_CHUNK_SIZE = 2**21
TILE = 2**15
"""Configs evaluated per numpy pass: small enough that the temporaries stay in cache."""


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


class _FailureCollector:
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
        fast = vector_widths(*form, t.block_size[g], t.kernel_block_size[g], t.dcp_size[g], m, e, s)
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
        span=t.block_size * t.dcp_size * a,
        per=a * bpk,
        kbs_c=t.kernel_block_size * t.dcp_size,
        bs_c=t.block_size * t.dcp_size,
        bpk=bpk,
    )
    collector = _FailureCollector(examples)
    not_judged = 0
    cached: tuple[int, _Lengths] | None = None  # (chunk start, its rows)
    chunk = min(domain.num_lengths, max(1, chunk_size))
    for g0, g1, j0, j1 in _tiles(t.block_size.size, domain.num_lengths, chunk_size):
        c0 = j0 - j0 % chunk
        if cached is None or cached[0] != c0:
            m, encoder_budget, s = domain.lengths(c0, min(c0 + chunk, domain.num_lengths))
            e = np.minimum(encoder_budget, np.maximum(m, encoder_budget))  # min(E, B) with B = max(M, E)
            big_l = vector_length(form[0] if form is not None else "fixed", m, encoder_budget, s)
            cached = (c0, _Lengths(-big_l[None, :], -e[None, :]))
        ln = cached[1]
        tile = _Lengths(ln.neg_l[:, j0 - c0 : j1 - c0], ln.neg_e[:, j0 - c0 : j1 - c0])
        group_cols = _Groups(*(col[g0:g1, None] for col in cols))
        if form is None:
            widths, unasked = policy_widths(domain, policy, g0, g1, j0, j1)
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


def _width_mask(widths: np.ndarray, g: _Groups, neg_e: np.ndarray) -> np.ndarray:
    """Failing configs given the widths: ``needed > W`` or ``allocated > W`` (capacity's negated form)."""
    return capacity.overflows_negated(-widths, neg_e, g.kbs_c, g.bs_c, g.bpk)
