"""The capacity question, asked once: do these row widths cover these tokens?

Two invariants per group and request: coverage (the row has an entry for every
token, ``cdiv(n, kbs*C)`` entries) and allocation fit (the entries the manager
appends, ``cdiv(n, bs*C) * bpk``, fit in the row). Properties, the ``check``,
``verify`` and ``prove`` commands, the audit and the findings all take their
answer from here: :func:`demand` and :class:`Demand` for one row,
:func:`violations` for a batch (as :class:`Shortfall` records that carry
everything a diagnosis needs), :func:`cross_overflow` for the first cross
group that falls short (a :class:`Shortfall` too), and :func:`vector_overflows` for numpy arrays of
configs (``prove``), which a property holds equal to the scalar form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np

from crossattn_sizing.core import admission
from crossattn_sizing.core.admission_rules import AdmissionRule, EngineRequest, VllmAdmission
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.core.policies import Policy, checked_widths

Invariant = Literal["coverage", "allocation"]


class Demand(NamedTuple):
    """What ``num_tokens`` positions ask of one group's row, in row entries."""

    needed: int  # entries with a column for every token (coverage)
    received: int  # entries the manager appends (allocation fit)

    def overflows(self, width: int) -> list[tuple[Invariant, int]]:
        """Each invariant a row of ``width`` entries breaks, coverage first, with its entries."""
        found: list[tuple[Invariant, int]] = []
        if self.needed > width:
            found.append(("coverage", self.needed))
        if self.received > width:
            found.append(("allocation", self.received))
        return found


def demand(config: RunnerConfig, group: KVCacheGroup, num_tokens: int) -> Demand:
    """The entries ``num_tokens`` positions need and receive in ``group``'s row (admission model)."""
    return Demand(
        admission.entries_needed(config, group, num_tokens),
        admission.entries_received(config, group, num_tokens),
    )


def cross_overflow(
    widths: Sequence[int], config: RunnerConfig, encoder_len: int | None = None
) -> Shortfall | None:
    """The first cross group (coverage before allocation) whose row cannot hold ``encoder_len``.

    ``encoder_len`` defaults to the largest admitted length, the one every
    cross row must hold.
    """
    e = admission.encoder_bound(config) if encoder_len is None else encoder_len
    for gi in config.cross_groups():
        over = demand(config, config.groups[gi], e).overflows(widths[gi])
        if over:
            invariant, entries = over[0]
            return shortfall(config, gi, invariant, 0, e, entries, widths[gi])
    return None


def overflows_negated(
    neg_width: np.ndarray, neg_tokens: np.ndarray, kbs_c: np.ndarray, bs_c: np.ndarray, bpk: np.ndarray
) -> np.ndarray:
    """:meth:`Demand.overflows` over broadcast arrays, in the negated form ``prove``'s tiles keep.

    ``-cdiv(x, d) == (-x) // d``, so with ``ng = -W`` and ``ne = -n``:
    ``needed > W`` iff ``ne // (kbs*C) < ng`` and ``received > W`` iff
    ``(ne // (bs*C)) * bpk < ng``. Dividing a row by a column takes numpy's
    fast path, which is why ``prove`` passes pre-negated operands.
    """
    fail: np.ndarray = (neg_tokens // kbs_c) < neg_width
    received = neg_tokens // bs_c
    received *= bpk
    fail |= received < neg_width
    return fail


def vector_overflows(
    width: np.ndarray, tokens: np.ndarray, bs: np.ndarray, kbs: np.ndarray, dcp_size: np.ndarray
) -> np.ndarray:
    """Element-wise: does a DCP-sharded row of ``width`` entries break either invariant for ``tokens``?"""
    w, n, b, k, c = (np.asarray(a, dtype=np.int64) for a in (width, tokens, bs, kbs, dcp_size))
    return overflows_negated(-w, -n, k * c, b * c, b // k)


@dataclass(frozen=True)
class Shortfall:
    """A row too narrow: one request's tokens in one group of ``config`` need more entries than it has.

    The one record of "too narrow" in the package: ``check``, the properties,
    ``reproduce`` and the audit all state a failure of a policy with it, so a
    diagnosis names the same numbers wherever it is printed.
    """

    invariant: Invariant
    group: int
    kind: str
    request: int
    num_tokens: int  # tokens the row must hold (the encoder's, in a cross group)
    needed: int  # row entries the request needs (coverage) or receives (allocation)
    given: int  # row width in entries
    first_uncovered_token: int  # first token position without a column
    config: RunnerConfig

    def explain(self) -> str:
        """The shortfall as a sentence: which invariant, which group and request, and by how much."""
        what = "encoder" if self.kind == GroupKind.CROSS.value else "decoder"
        if self.invariant == "coverage":
            head = (
                f"coverage: group {self.group} ({self.kind}) request {self.request} has {self.num_tokens} "
                f"{what} tokens needing {self.needed} columns but the row has {self.given}; "
                f"token {self.first_uncovered_token} is the first without a column"
            )
        else:
            head = (
                f"allocation: group {self.group} ({self.kind}) request {self.request} receives "
                f"{self.needed} block-table entries for {self.num_tokens} {what} tokens but the row has "
                f"{self.given}; {self.needed - self.given} entries spill into the next row"
            )
        return head


def shortfall(config: RunnerConfig, gi: int, invariant: Invariant, request: int, num_tokens: int,
              entries: int, width: int) -> Shortfall:  # fmt: skip
    """The record of group ``gi``'s row of ``width`` entries falling ``entries`` short for one request."""
    group = config.groups[gi]
    if invariant == "coverage":
        first = width * admission.tokens_per_entry(config, group)
    else:
        first = (width // group.bpk) * group.block_size * config.dcp_factor(group)
    return Shortfall(invariant, gi, group.kind.value, request, num_tokens, entries, width, first, config)


def request_tokens(config: RunnerConfig, kind: GroupKind, encoder_len: int) -> int | None:
    """Tokens a group's row must hold for one request, or None where the invariant is not about tokens.

    Cross groups hold the encoder tokens; full and sliding-window groups the
    decoder's, up to ``max_model_len`` (sliding-window rows keep full width in
    the engine, with out-of-window blocks nulled). Mamba rows hold state blocks.
    """
    if kind is GroupKind.CROSS:
        return encoder_len
    if kind is GroupKind.MAMBA:
        return None
    return config.max_model_len


def violations(
    policy: Policy,
    config: RunnerConfig,
    encoder_lens: Sequence[int],
    invariants: Sequence[Invariant] = ("coverage", "allocation"),
    rule: AdmissionRule | None = None,
) -> list[Shortfall]:
    """Every shortfall, by the chosen invariants, of a batch of admitted requests.

    Encoder lengths ``rule`` (default: vLLM's, ``1 <= e <= min(E, B)``) does
    not admit are the caller's error: the scheduler never shows them to a
    block table, so they cannot be held against a policy.
    """
    rule = VllmAdmission(config) if rule is None else rule
    for e in encoder_lens:
        refused = rule.refusal(EngineRequest(e, 0)) if e >= 1 else "no encoder tokens"
        if refused is not None:
            raise ValueError(
                f"encoder length {e} is not admitted (bound {admission.encoder_bound(config)})"
            )
    widths = checked_widths(policy, config)
    found: list[Shortfall] = []
    for gi, group in enumerate(config.groups):
        for ri, e in enumerate(encoder_lens):
            n = request_tokens(config, group.kind, e)
            if n is None:
                continue
            for invariant, entries in demand(config, group, n).overflows(widths[gi]):
                if invariant in invariants:
                    found.append(shortfall(config, gi, invariant, ri, n, entries, widths[gi]))
    return found
