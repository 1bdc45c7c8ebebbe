"""What ``prove`` found, as values: the counterexamples and the run's totals.

Why apart from the check: the CLI, verify's prove row and the benchmarks
read these records without running anything, and a record's meaning
(``holds``, ``judged``) is decided once, here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from crossattn_sizing.base.outcome import Outcome


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
    encoder_len: int
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
    def outcome(self) -> Outcome:
        """Holds, fails, or not run when nothing could be judged."""
        if self.judged == 0:
            return Outcome.NOT_RUN
        return Outcome.HOLDS if self.holds else Outcome.FAILS

    @property
    def method(self) -> str:
        """How the widths were obtained, for reports."""
        if self.vectorised:
            return "vectorised"
        return "batched calls (widths_many)" if self.batched else "one call per config"

    def to_dict(self) -> dict[str, Any]:
        """The result as ``prove --json`` writes it."""
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
