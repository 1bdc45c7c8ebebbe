"""Judging a real model's scenario under a sizing policy: the verdict ``reproduce`` prints.

The question is the capacity invariants' (:mod:`crossattn_sizing.core.capacity`) for
the scenario's request, but the answer is worded for the person who hit the
bug: which encoder tokens have no column, how many columns were needed and
given, and, when the row is wide enough, *why* it is (the admitted bound, or
only this model's largest request).
"""

from __future__ import annotations

from dataclasses import dataclass

from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.core import admission
from crossattn_sizing.core.capacity import Shortfall, violations
from crossattn_sizing.core.config import GroupKind, RunnerConfig
from crossattn_sizing.core.policies import Policy, checked_widths, sizing_length
from crossattn_sizing.models.adapters import ModelScenario


@dataclass(frozen=True)
class CrossRow:
    """One cross-attention group's row against the scenario's request, wide enough or not.

    Not a verdict (that is :class:`ScenarioVerdict`'s) nor a shortfall (a :class:`Shortfall`
    says that): what ``reproduce`` needs to say *why* a row is wide enough.
    """

    group: int
    width: int  # row entries given
    needed: int  # row entries the request's encoder tokens need
    tokens_per_entry: int
    encoder_len: int
    bound: int  # min(E, B): the longest encoder input the scheduler admits

    @property
    def covered_tokens(self) -> int:
        """Encoder tokens the row has columns for."""
        return self.width * self.tokens_per_entry


@dataclass(frozen=True)
class ScenarioVerdict:
    """The policy's widths for a scenario, what breaks, and the lines that say so."""

    widths: tuple[int, ...]
    cross: tuple[CrossRow, ...]
    shortfalls: tuple[Shortfall, ...]

    @property
    def outcome(self) -> Outcome:
        """Holds when the request breaks no invariant, else fails (there is no other ending here)."""
        return Outcome.FAILS if self.shortfalls else Outcome.HOLDS


def judge(policy: Policy, scenario: ModelScenario) -> ScenarioVerdict:
    """The widths ``policy`` gives the scenario's config, and every shortfall of its request."""
    config = scenario.config
    e = scenario.encoder_len.value
    widths = checked_widths(policy, config)
    cross = tuple(
        CrossRow(
            g,
            widths[g],
            admission.entries_needed(config, config.groups[g], e),
            admission.tokens_per_entry(config, config.groups[g]),
            e,
            admission.encoder_bound(config),
        )
        for g in config.cross_groups()
    )
    found = tuple(violations(policy, config, [e] * config.max_num_reqs))
    return ScenarioVerdict(widths, cross, found)


def bound_label(config: RunnerConfig) -> str:
    """What the admitted bound ``min(E, B)`` is called, so the reason names its source."""
    if config.max_num_encoder_input_tokens is None:
        return "max_num_encoder_input_tokens (defaults to max_num_batched_tokens)"
    if config.max_num_batched_tokens < config.max_num_encoder_input_tokens:
        return "max_num_batched_tokens (below max_num_encoder_input_tokens)"
    return "max_num_encoder_input_tokens"


def failure_lines(verdict: ScenarioVerdict, config: RunnerConfig) -> list[str]:
    """The diagnosis of a failing verdict: missing tokens, columns needed and given, spills.

    Every request of a scenario is the same, so one line per group and
    invariant says it all; the encoder tokens without a column come first.
    """
    lines: list[str] = []
    seen: set[tuple[int, str]] = set()
    cross = GroupKind.CROSS.value
    uncovered = [s for s in verdict.shortfalls if s.invariant == "coverage" and s.kind == cross]
    for s in [*uncovered, *(s for s in verdict.shortfalls if s not in uncovered)]:
        if (s.group, s.invariant) in seen:
            continue
        seen.add((s.group, s.invariant))
        if s not in uncovered:
            lines.append(s.explain())
            continue
        first, last = s.first_uncovered_token, s.num_tokens - 1
        per_column = admission.tokens_per_entry(config, config.groups[s.group])
        lines.append(
            f"tokens {first}..{last} ({last - first + 1} tokens) have no column in cross group "
            f"{s.group}: needed {s.needed} columns, given {s.given} ({per_column} tokens per column)"
        )
    return lines


def safe_reason(verdict: ScenarioVerdict, scenario: ModelScenario) -> list[str]:
    """Why every encoder token has a column: the admitted bound, or only this model's requests."""
    config = scenario.config
    lines = []
    for cv in verdict.cross:
        head = f"width {cv.width} columns = {cv.covered_tokens} tokens"
        if cv.covered_tokens >= cv.bound:
            lines.append(f"{head} >= admitted bound {cv.bound} = {bound_label(config)}")
        else:
            lines.append(
                f"{head} >= {cv.encoder_len} encoder tokens, the most a request of this model has "
                f"({scenario.encoder_len.why}); the admitted bound {cv.bound} is not covered, but no "
                "request of this model reaches it"
            )
    return lines


def fixed_width_hint(scenario: ModelScenario) -> str:
    """What the fixed sizing would give, for the line that says how the bug is fixed."""
    config = scenario.config
    fixed = sizing_length(config, "fixed")
    return (
        f"the fix (PR #46753, policy mrv2) sizes rows for max(M, E, S) = max({config.max_model_len}, "
        f"{config.encoder_budget}, {config.source_positions}) = {fixed} tokens"
    )
