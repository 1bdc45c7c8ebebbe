"""The bounded config domain ``prove`` checks: which configs, in which order, counted not listed.

Why a module of its own: what is proved is only as good as the configs it is
proved over, and the domain's rules (which shapes the engine accepts, which
``B`` it starts with) are read apart from how each config is judged.

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
Configs are ordered canonically by ``(bs, kbs, C, I, M, E, S)`` with ``S``
absent first.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from crossattn_sizing.base.errors import HarnessError
from crossattn_sizing.base.limits import MAX_BLOCK_SIZE, MAX_INT_DIGITS, too_long
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.core.config_tile import NO_S

ABSENT = NO_S
"""``max_source_positions`` absent from the model config (sorts before 0)."""

MAX_LENGTH = 2**31 - 1
MAX_DCP = 2**10
MAX_AXIS_VALUES = 2**24
MAX_GROUP_ROWS = 2**24


class DomainError(HarnessError, ValueError):
    """A domain option that cannot be enumerated; the message names the option and the rule."""


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
    dcp_size: np.ndarray
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
    ns_all, ds_all = np.concatenate(ns), np.concatenate(ds)
    offsets = np.zeros(n_max + 2, dtype=np.int64)
    offsets[1:] = np.cumsum(np.bincount(ns_all, minlength=n_max + 1))
    return offsets, ds_all[np.lexsort((ds_all, ns_all))]


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
            f"--block-size/--dcp: {rows} group shapes (bs, kbs, C, I) exceed {limit}; "
            "narrow --block-size, --kernel-block-size or --dcp"
        )
    cols: list[tuple[np.ndarray, ...]] = []
    for c in dcp_sizes.tolist():
        if c == 1:
            ones = np.ones_like(bs)
            cols.append((bs, kbs, ones, ones))
        else:
            owner, inter = _expand_divisors(kbs, offsets, divs)
            cols.append((bs[owner], kbs[owner], np.full(owner.size, c, dtype=np.int64), inter))
    bs, kbs, dcp_size, inter = (np.concatenate(parts) for parts in zip(*cols, strict=True))
    order = np.lexsort((inter, dcp_size, kbs, bs))
    return GroupTable(bs[order], kbs[order], dcp_size[order], inter[order])


@dataclass(frozen=True, eq=False)
class Domain:
    """A bounded config domain; its size is counted, never materialised.

    ``specs`` keeps the option texts it was parsed from, for reports.
    """

    block_sizes: np.ndarray
    dcp_sizes: np.ndarray
    max_model_lens: np.ndarray
    encoder_budgets: np.ndarray
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
        dcp_sizes: str = "1",
        max_model_lens: str,
        encoder_budgets: str,
        source_positions: str,
    ) -> Domain:
        """A domain from the CLI's option texts; bad text raises :class:`DomainError`."""
        kbs = (
            None
            if kernel_block_sizes.strip().lower() == "all"
            else parse_values(kernel_block_sizes, "--kernel-block-size", minimum=1, maximum=MAX_BLOCK_SIZE)
        )
        domain = cls(
            block_sizes=parse_values(block_sizes, "--block-size", minimum=1, maximum=MAX_BLOCK_SIZE),
            dcp_sizes=parse_values(dcp_sizes, "--dcp", minimum=1, maximum=MAX_DCP),
            max_model_lens=parse_values(max_model_lens, "--max-model-len", minimum=1, maximum=MAX_LENGTH),
            encoder_budgets=parse_values(encoder_budgets, "--encoder-budget", minimum=1, maximum=MAX_LENGTH),
            source_positions=parse_values(
                source_positions, "--source-positions", minimum=0, maximum=MAX_LENGTH, allow_absent=True
            ),
            kernel_block_sizes=kbs,
            specs={
                "block_sizes": block_sizes,
                "kernel_block_sizes": kernel_block_sizes,
                "dcp_sizes": dcp_sizes,
                "max_model_lens": max_model_lens,
                "encoder_budgets": encoder_budgets,
                "source_positions": source_positions,
            },
        )
        if domain.groups.block_size.size == 0:
            raise DomainError(
                f"--kernel-block-size {kernel_block_sizes!r}: no listed kernel block size divides "
                f"any of --block-size {block_sizes!r}"
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
        return (self.max_model_lens.size, self.encoder_budgets.size, self.source_positions.size)

    @property
    def num_lengths(self) -> int:
        """Length combinations ``(M, E, S)`` in the domain: the product of its axes."""
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
        return self.max_model_lens[mi], self.encoder_budgets[ei], self.source_positions[si]

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
            dcp_size=int(t.dcp_size[g]),
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
            "E": span(self.encoder_budgets),
            "S": span(self.source_positions),
            "B": "max(M, E): the smallest B the engine accepts that admits E, so e = E",
        }
