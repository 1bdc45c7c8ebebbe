"""The capacity invariants as data: coverage and allocation fit, per group and request.

Properties, the ``check`` and ``verify`` commands and the audit all ask the
same question, so it is asked here once and answered with :class:`Violation`
records that carry everything a diagnosis needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from crossattn_sizing import admission
from crossattn_sizing.config import GroupKind, RunnerConfig
from crossattn_sizing.policies import Policy, checked_widths

Invariant = Literal["coverage", "allocation"]


@dataclass(frozen=True)
class Violation:
    """One request whose row cannot hold its tokens in one group."""

    invariant: Invariant
    group: int
    kind: str
    request: int
    num_tokens: int
    needed: int  # row entries the request needs (coverage) or receives (allocation)
    given: int  # row width in entries
    first_uncovered_token: int  # first token position without a column

    def explain(self) -> str:
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
) -> list[Violation]:
    """Every violation of the chosen invariants for a batch of admitted requests.

    Encoder lengths the config does not admit are the caller's error: the
    scheduler never shows them to a block table, so they cannot be held
    against a policy.
    """
    for e in encoder_lens:
        if not admission.admits(config, e):
            raise ValueError(
                f"encoder length {e} is not admitted (bound {admission.encoder_bound(config)})"
            )
    widths = checked_widths(policy, config)
    found: list[Violation] = []
    for gi, group in enumerate(config.groups):
        width = widths[gi]
        per_entry = admission.tokens_per_entry(config, group)
        for ri, e in enumerate(encoder_lens):
            n = request_tokens(config, group.kind, e)
            if n is None:
                continue
            if "coverage" in invariants:
                needed = admission.entries_needed(config, group, n)
                if needed > width:
                    found.append(
                        Violation("coverage", gi, group.kind.value, ri, n, needed, width, width * per_entry)
                    )
            if "allocation" in invariants:
                received = admission.entries_received(config, group, n)
                if received > width:
                    first = (width // group.bpk) * group.block_size * config.dcp_factor(group)
                    found.append(
                        Violation("allocation", gi, group.kind.value, ri, n, received, width, first)
                    )
    return found
