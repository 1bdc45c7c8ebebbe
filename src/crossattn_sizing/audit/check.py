"""Coverage and allocation-fit of an extracted policy over a deterministic sweep of configs.

The sweep is fixed (no randomness) so an audit of the same release always
reports the same counterexample; it starts with the Nemotron-Parse-like
config of shared/spec.md, the known bug shape, so a pre-fix release is
reported with that config. For each cross-attention group the admitted bound
``e = admission.encoder_bound(config)`` is checked: the width needs are
monotone in ``e``, so the bound is the worst admitted request.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from crossattn_sizing import admission
from crossattn_sizing.audit.extract import RUNNERS, ExtractedPolicy, ReadError, read_runner
from crossattn_sizing.audit.modules import ModuleIndex
from crossattn_sizing.audit.sources import SourceTree
from crossattn_sizing.config import ConfigError, GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.policies import Policy

# Nemotron-Parse, 2048x1664 page with patch 16: (2048//16) * ((1664//16)//4) + 1 encoder tokens.
NEMOTRON_TOKENS = 3329
NEMOTRON = RunnerConfig(
    max_model_len=2048,
    max_num_batched_tokens=4096,
    max_num_encoder_input_tokens=4096,
    max_source_positions=None,
    groups=(KVCacheGroup(GroupKind.FULL, 16), KVCacheGroup(GroupKind.CROSS, 16)),
)

HOLDS, FAILS, UNREADABLE = "holds", "fails", "could not be read"


@dataclass(frozen=True)
class Shortfall:
    """A cross-attention row too narrow for ``encoder_tokens``: entries needed vs given."""

    config: RunnerConfig
    group: int
    check: str  # "coverage" or "allocation"
    encoder_tokens: int
    needed: int
    given: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "describe": self.config.describe(),
            "group": self.group,
            "check": self.check,
            "encoder_tokens": self.encoder_tokens,
            "columns_needed": self.needed,
            "columns_given": self.given,
        }


@dataclass
class RunnerVerdict:
    """One runner of one release: holds, fails (with a counterexample) or could not be read."""

    source: str
    runner: str
    title: str
    status: str
    where: str | None = None
    reason: str | None = None
    configs_checked: int = 0
    counterexample: Shortfall | None = None
    nemotron: dict[str, Any] | None = None
    conditions: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "runner": self.runner,
            "title": self.title,
            "verdict": self.status,
            "where": self.where,
            "reason": self.reason,
            "configs_checked": self.configs_checked,
            "counterexample": self.counterexample.to_dict() if self.counterexample else None,
            "nemotron_parse": self.nemotron,
            "assumed_conditions": self.conditions,
        }


def shortfall(policy: Policy, config: RunnerConfig, encoder_tokens: int | None = None) -> Shortfall | None:
    """The first cross group whose row cannot hold ``encoder_tokens`` (default: the admitted bound)."""
    widths = policy(config)
    if len(widths) != len(config.groups):
        raise ReadError(f"{len(widths)} widths for {len(config.groups)} groups")
    e = admission.encoder_bound(config) if encoder_tokens is None else encoder_tokens
    for gi in config.cross_groups():
        group = config.groups[gi]
        needed = admission.entries_needed(config, group, e)
        if needed > widths[gi]:
            return Shortfall(config, gi, "coverage", e, needed, widths[gi])
        received = admission.entries_received(config, group, e)
        if received > widths[gi]:
            return Shortfall(config, gi, "allocation", e, received, widths[gi])
    return None


def _groups(bs: int, kbs: int, sharded: bool) -> tuple[KVCacheGroup, ...]:
    return (
        KVCacheGroup(GroupKind.FULL, bs, kbs),
        KVCacheGroup(GroupKind.CROSS, bs, kbs, dcp_sharded=sharded),
    )


def sweep_configs() -> list[RunnerConfig]:
    """Nemotron-Parse first, then Whisper-like and generic encoder-decoder shapes."""
    configs = [NEMOTRON]
    lengths = (448, 1024, 2048, 3328, 4096, 9000)
    budgets = (None, 1500, 3329, 8192)
    sources = (None, 1500, 4096)
    block_shapes = ((16, 16), (32, 16), (48, 16), (64, 32), (96, 32), (128, 64), (256, 128))
    for m, e, s, (bs, kbs), dcp in itertools.product(lengths, budgets, sources, block_shapes, (1, 2)):
        b = max(m, 4096)
        try:
            configs.append(
                RunnerConfig(
                    max_model_len=m,
                    max_num_batched_tokens=b,
                    max_num_encoder_input_tokens=e,
                    max_source_positions=s,
                    dcp_size=dcp,
                    groups=_groups(bs, kbs, True),
                )
            )
        except ConfigError:  # a shape the engine itself would refuse is no test
            continue
    return configs


def check_policy(policy: ExtractedPolicy, configs: list[RunnerConfig]) -> tuple[Shortfall | None, int]:
    """The first shortfall over ``configs`` and how many configs were checked."""
    for n, config in enumerate(configs, 1):
        found = shortfall(policy, config)
        if found is not None:
            return found, n
    return None, len(configs)


def audit_runner(index: ModuleIndex, runner: str, label: str, configs: list[RunnerConfig]) -> RunnerVerdict:
    """Read one runner and check it; every read problem becomes a "could not be read" verdict."""
    title = RUNNERS[runner].title
    try:
        policy = read_runner(index, runner, label)
    except ReadError as exc:
        return RunnerVerdict(label, runner, title, UNREADABLE, reason=str(exc))
    verdict = RunnerVerdict(label, runner, title, HOLDS, where=policy.where)
    try:
        nemo = shortfall(policy, NEMOTRON, NEMOTRON_TOKENS)
        widths = policy(NEMOTRON)
        cross = NEMOTRON.cross_groups()[0]
        needed = admission.entries_needed(NEMOTRON, NEMOTRON.groups[cross], NEMOTRON_TOKENS)
        verdict.nemotron = {
            "encoder_tokens": NEMOTRON_TOKENS,
            "config": NEMOTRON.describe(),
            "columns_needed": needed,
            "columns_given": widths[cross],
            "holds": nemo is None,
        }
        verdict.conditions = list(policy.conditions)
        found, checked = check_policy(policy, configs)
    except ReadError as exc:
        verdict.status, verdict.reason = UNREADABLE, str(exc)
        return verdict
    verdict.configs_checked = checked
    if found is not None:
        verdict.status, verdict.counterexample = FAILS, found
    return verdict


def audit_tree(tree: SourceTree, runners: list[str] | None = None,
               configs: list[RunnerConfig] | None = None) -> list[RunnerVerdict]:  # fmt: skip
    """Verdicts for each runner of one source tree."""
    index = ModuleIndex(tree)
    sweep = configs if configs is not None else sweep_configs()
    return [audit_runner(index, r, tree.label, sweep) for r in (runners or list(RUNNERS))]
