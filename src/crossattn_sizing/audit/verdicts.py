"""Coverage and allocation-fit of an extracted policy over a deterministic sweep of configs.

The sweep is fixed (no randomness) so an audit of the same release always
reports the same counterexample; it starts with the Nemotron-Parse-like
config of docs/spec.md, the known bug shape, so a pre-fix release is
reported with that config. For each cross-attention group the admitted bound
``e = admission.encoder_bound(config)`` is checked: the width needs are
monotone in ``e``, so the bound is the worst admitted request.

Which ids a row stores is read, not assumed. Where a config splits manager
blocks into smaller kernel blocks, the policy is also evaluated on its
"manager twin" (kernel block = manager block): a width ``bpk`` times the
twin's means the row stores kernel-block ids (checked as such); a width equal
to the twin's, from a table class that never names a kernel block size, means
the row stores manager-block ids, and the config is checked as the twin (the
release either has no kernel-block split or expands ids elsewhere). Anything
else is "could not be read".

The extracted widths are also compared with every built-in policy of
:mod:`crossattn_sizing.core.policies` on the same checked configs, so the report
says which modelled rule a release implements.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crossattn_sizing.audit.extract import (
    RUNNERS,
    ExtractedPolicy,
    Extraction,
    ReadError,
    RunnerAbsent,
    read_runner,
)
from crossattn_sizing.audit.modules import ModuleIndex
from crossattn_sizing.audit.scope import Scope, v2_encoder_decoder_scope
from crossattn_sizing.base.errors import ConfigError
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.core import admission, capacity, known_configs
from crossattn_sizing.core.capacity import Shortfall
from crossattn_sizing.core.config import KVCacheGroup, RunnerConfig
from crossattn_sizing.core.known_configs import encoder_decoder_groups
from crossattn_sizing.core.policies import BUILTIN_POLICIES, widths
from crossattn_sizing.releases.sources import SourceTree

# The shapes the audit replays (docs/spec.md), from the one module that writes them out.
NEMOTRON_TOKENS = known_configs.NEMOTRON_PAGE_TOKENS
NEMOTRON = known_configs.nemotron_parse()
WHISPER_TOKENS = known_configs.WHISPER_FRAMES

READ_PATH = "read"
EXECUTED_PATH = "executed"
KERNEL_IDS, MANAGER_IDS = "kernel-block ids", "manager-block ids"


def counterexample_json(found: Shortfall) -> dict[str, Any]:
    """A counterexample as the audit's JSON states it (its keys predate :class:`Shortfall`)."""
    return {
        "config": found.config.to_dict(),
        "describe": found.config.describe(),
        "group": found.group,
        "check": found.invariant,
        "encoder_len": found.num_tokens,
        "columns_needed": found.needed,
        "columns_given": found.given,
    }


@dataclass
class RunnerVerdict:
    """One runner of one release: holds, fails (with a counterexample) or could not be read."""

    source: str
    runner: str
    title: str
    outcome: Outcome  # holds, fails, could not be read, or absent
    where: str | None = None
    reason: str | None = None
    configs_checked: int = 0
    configs_failing: int = 0
    counterexample: Shortfall | None = None
    nemotron: dict[str, Any] | None = None
    whisper: dict[str, Any] | None = None
    conditions: list[str] = field(default_factory=list)
    row_entries: str | None = None
    row_entries_why: str | None = None
    matches: list[str] = field(default_factory=list)
    closest: dict[str, Any] | None = None
    rules: list[str] = field(default_factory=list)
    # How the verdict was reached: "read" (the source's syntax tree, this package) or
    # "executed" (the release's own code ran, through crossattn_sizing.engine).
    path: str = READ_PATH
    path_why: str = ""  # why the executed path was not taken, where it was tried
    wall_s: float | None = None
    scope: Scope | None = None
    # ``prove --symbolic`` on this runner (V2 only), as its JSON: set by the audit command.
    symbolic: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The verdict as the JSON report writes it."""
        return {
            "source": self.source,
            "runner": self.runner,
            "title": self.title,
            "verdict": self.outcome,
            "path": self.path,
            "wall_s": None if self.wall_s is None else round(self.wall_s, 2),
            "where": self.where,
            "reason": self.reason,
            "configs_checked": self.configs_checked,
            "configs_failing": self.configs_failing,
            "counterexample": counterexample_json(self.counterexample) if self.counterexample else None,
            "nemotron_parse": self.nemotron,
            "whisper": self.whisper,
            "assumed_conditions": self.conditions,
            "row_entries": self.row_entries,
            "row_entries_why": self.row_entries_why,
            "matches_builtin": self.matches,
            "closest_builtin": self.closest,
            "equivalent_rules": self.rules,
            "encoder_decoder_scope": self.scope.to_dict() if self.scope else None,
            "path_why": self.path_why,
            "symbolic": self.symbolic,
        }


def shortfall_of(widths: tuple[int, ...], config: RunnerConfig,
                 encoder_len: int | None = None) -> Shortfall | None:  # fmt: skip
    """The first cross group whose row of ``widths`` (in the entries ``config``'s rows store) cannot
    hold ``encoder_len`` (default: the admitted bound)."""
    if len(widths) != len(config.groups):
        raise ReadError(f"{len(widths)} widths for {len(config.groups)} groups")
    return capacity.cross_overflow(widths, config, encoder_len)


def manager_twin(config: RunnerConfig) -> RunnerConfig:
    """``config`` with every kernel block size equal to its manager block size."""
    groups = tuple(KVCacheGroup(g.kind, g.block_size, None, g.dcp_sharded) for g in config.groups)
    return config.replace(groups=groups)


@dataclass(frozen=True)
class Checked:
    """One sweep config as the release runs it: the config checked, its widths and the row entries."""

    config: RunnerConfig  # the sweep's config, or its manager twin for manager-id rows
    widths: tuple[int, ...]
    entries: str | None  # KERNEL_IDS, MANAGER_IDS, or None when no group splits its blocks
    conditions: tuple[str, ...] = ()  # undecided conditions the tables were built under


def read_sizing(policy: Any, config: RunnerConfig) -> Extraction:
    """One read of ``policy`` over ``config``: its own :class:`Extraction`, or just its widths."""
    read = getattr(policy, "read", None)
    return read(config) if read is not None else Extraction(policy(config))


def evaluate(policy: ExtractedPolicy, config: RunnerConfig) -> Checked:
    """Widths of ``config`` and, where kernel blocks are smaller, which ids the rows store."""
    first = read_sizing(policy, config)
    widths = first.widths
    if all(g.bpk == 1 for g in config.groups):
        return Checked(config, widths, None, first.conditions)
    twin = manager_twin(config)
    second = read_sizing(policy, twin)
    conditions = tuple(dict.fromkeys([*first.conditions, *second.conditions]))
    if widths == tuple(w * g.bpk for w, g in zip(second.widths, config.groups, strict=True)):
        return Checked(config, widths, KERNEL_IDS, conditions)
    if widths == second.widths:
        mentions = second.kernel_block_mentions
        if not mentions:
            return Checked(twin, widths, MANAGER_IDS, conditions)
        raise ReadError(
            f"for {config.describe()} the row width ignores the kernel block size, but the table "
            f"class handles kernel blocks ({mentions[0]}): which ids a row stores is not determined"
        )
    raise ReadError(
        f"for {config.describe()} the widths {widths} are neither the manager-block widths "
        f"{second.widths} nor those times the kernel blocks per manager block"
    )


def sweep_configs() -> list[RunnerConfig]:
    """Nemotron-Parse first, then Whisper-like and generic encoder-decoder shapes."""
    configs = [NEMOTRON]
    lengths = (448, 1024, 2048, 3328, 4096, 9000)
    budgets = (None, 1500, 3329, 8192)
    sources = (None, 1500, 4096)
    block_shapes = ((16, 16), (32, 16), (48, 16), (64, 32), (96, 32), (128, 64), (256, 128))
    for m, e, s, (bs, kbs), dcp_size in itertools.product(lengths, budgets, sources, block_shapes, (1, 2)):
        b = max(m, 4096)
        try:
            configs.append(
                RunnerConfig(
                    max_model_len=m,
                    max_num_batched_tokens=b,
                    max_num_encoder_input_tokens=e,
                    max_source_positions=s,
                    dcp_size=dcp_size,
                    groups=encoder_decoder_groups(bs, kbs),
                )
            )
        except ConfigError:  # a shape the engine itself would refuse is no test
            continue
    return configs


def row_entries(checked: list[Checked]) -> tuple[str | None, str | None]:
    """Which ids the rows store over a sweep, and how that was read; mixed answers are unreadable."""
    kinds = {c.entries for c in checked} - {None}
    if len(kinds) > 1:
        raise ReadError("rows store kernel-block ids for some configs and manager-block ids for others")
    if not kinds:
        return None, "no checked config splits a manager block into kernel blocks"
    (kind,) = kinds
    n = sum(c.entries is not None for c in checked)
    if kind == KERNEL_IDS:
        why = f"on {n} configs with kernel block < manager block the width is the manager width times bs//kbs"
    else:
        why = (
            f"on {n} configs with kernel block < manager block the width ignores the kernel block size "
            "and the table class never names one; those configs are checked with kernel block = manager block"
        )
    return kind, why


def builtin_matches(checked: list[Checked],
                    builtins: dict[str, Callable[[RunnerConfig], tuple[int, ...]]] | None = None,
                    ) -> tuple[list[str], dict[str, Any] | None]:  # fmt: skip
    """The built-in policies equal to the extracted widths on every checked config.

    With none equal, the one agreeing on the most configs is returned with the
    first config where it differs.
    """
    builtins = dict(BUILTIN_POLICIES) if builtins is None else builtins
    matches: list[str] = []
    best: dict[str, Any] | None = None
    for name, builtin in builtins.items():
        differing = [c for c in checked if builtin(c.config) != c.widths]
        if not differing:
            matches.append(name)
            continue
        agree = len(checked) - len(differing)
        if best is None or agree > best["agreeing_configs"]:
            first = differing[0]
            best = {
                "policy": name,
                "agreeing_configs": agree,
                "configs": len(checked),
                "first_difference": {
                    "config": first.config.describe(),
                    "extracted": list(first.widths),
                    "builtin": list(builtin(first.config)),
                },
            }
    return matches, (None if matches else best)


# Every sizing rule policies.widths can express: (length, alignment).
RULES = tuple(itertools.product(("fixed", "prefix", "v1"), ("none", "pow2", "gcd")))
LENGTH_TEXT = {"fixed": "max(M, E, S)", "prefix": "max(M, S)", "v1": "max(M, E)"}


def rule_matches(checked: list[Checked]) -> list[str]:
    """Every (length, alignment) rule of :func:`~crossattn_sizing.core.policies.widths` equal on all configs.

    Names the rule a release implements even where no built-in policy has it
    (e.g. V1's ``max(M, E)`` with the power-of-two alignment).
    """
    return [
        f"L = {LENGTH_TEXT[length]}, alignment {alignment}"
        for length, alignment in RULES
        if all(widths(c.config, length, alignment) == c.widths for c in checked)  # type: ignore[arg-type]
    ]


def whisper_configs() -> list[RunnerConfig]:
    """Whisper-shaped configs (M = 448, S = 1500) over the sweep's block shapes, without DCP."""
    shapes = ((16, 16), (32, 16), (48, 16), (64, 32), (96, 32), (128, 64), (256, 128))
    return [
        known_configs.whisper(max_num_batched_tokens=8192).replace(groups=encoder_decoder_groups(bs, kbs))
        for bs, kbs in shapes
    ]


def whisper_check(checked: list[Checked]) -> dict[str, Any]:
    """Whether every Whisper-shaped config's cross row (``checked``, evaluated) holds a 1500-frame output."""
    for item in checked:
        found = shortfall_of(item.widths, item.config, WHISPER_TOKENS)
        if found is not None:
            return {"encoder_len": WHISPER_TOKENS, "configs": len(checked), "holds": False,
                    "config": item.config.describe(), "columns_needed": found.needed,
                    "columns_given": found.given}  # fmt: skip
    return {"encoder_len": WHISPER_TOKENS, "configs": len(checked), "holds": True,
            "config": "M=448, S=1500, bs in {16, 32, 48, 64, 96, 128, 256}"}  # fmt: skip


def audit_runner(index: ModuleIndex, runner: str, label: str, configs: list[RunnerConfig],
                 executed: Any = None) -> RunnerVerdict:  # fmt: skip
    """Check one runner, timed: ``executed`` (the release's code, run) if given, else read from the source.

    V2 verdicts carry the encoder-decoder scope read beside them.
    """
    start = time.perf_counter()
    verdict = _read_and_check(index, runner, label, configs, executed)
    if runner == "v2" and verdict.where is not None:
        verdict.scope = v2_encoder_decoder_scope(index)
    verdict.wall_s = time.perf_counter() - start
    return verdict


def _read_and_check(index: ModuleIndex, runner: str, label: str,
                    configs: list[RunnerConfig], executed: Any = None) -> RunnerVerdict:  # fmt: skip
    """Check one runner; every read problem becomes a "could not be read" verdict."""
    title = RUNNERS[runner].title
    if executed is not None:
        policy = executed
    else:
        try:
            policy = read_runner(index, runner, label)
        except RunnerAbsent as exc:
            return RunnerVerdict(label, runner, title, Outcome.ABSENT, reason=str(exc))
        except ReadError as exc:
            return RunnerVerdict(label, runner, title, Outcome.UNREADABLE, reason=str(exc))
    verdict = RunnerVerdict(label, runner, title, Outcome.HOLDS, where=policy.where,
                            path=READ_PATH if executed is None else EXECUTED_PATH)  # fmt: skip
    try:
        nemo_read = read_sizing(policy, NEMOTRON)
        nemo_widths = nemo_read.widths
        nemo = shortfall_of(nemo_widths, NEMOTRON, NEMOTRON_TOKENS)
        cross = NEMOTRON.cross_groups()[0]
        needed = admission.entries_needed(NEMOTRON, NEMOTRON.groups[cross], NEMOTRON_TOKENS)
        verdict.nemotron = {
            "encoder_len": NEMOTRON_TOKENS,
            "config": NEMOTRON.describe(),
            "columns_needed": needed,
            "columns_given": nemo_widths[cross],
            "holds": nemo is None,
        }
        checked = [evaluate(policy, c) for c in configs]
        verdict.row_entries, verdict.row_entries_why = row_entries(checked)
        verdict.matches, verdict.closest = builtin_matches(checked)
        verdict.rules = rule_matches(checked)
        whisper = [evaluate(policy, c) for c in whisper_configs()]
        verdict.whisper = whisper_check(whisper)
        # Every condition any read met, in the order met: the same whatever order the reads ran in.
        met = [*nemo_read.conditions, *(c for item in [*checked, *whisper] for c in item.conditions)]
        verdict.conditions = list(dict.fromkeys(met))
    except ReadError as exc:
        verdict.outcome, verdict.reason = Outcome.UNREADABLE, str(exc)
        return verdict
    verdict.configs_checked = len(checked)
    failing = [f for f in (shortfall_of(c.widths, c.config) for c in checked) if f is not None]
    verdict.configs_failing = len(failing)
    if failing:
        verdict.outcome, verdict.counterexample = Outcome.FAILS, failing[0]
    return verdict


def audit_tree(tree: SourceTree, runners: list[str] | None = None,
               configs: list[RunnerConfig] | None = None,
               executed: dict[str, tuple[Any, str]] | None = None) -> list[RunnerVerdict]:  # fmt: skip
    """Verdicts for each runner of one source tree.

    ``executed`` maps a runner to ``(policy, why_not)`` from the engine adapter:
    a policy is checked as executed; ``None`` falls back to reading, with why.
    """
    index = ModuleIndex(tree)
    sweep = configs if configs is not None else sweep_configs()
    out = []
    for r in runners or list(RUNNERS):
        policy, why_not = (executed or {}).get(r, (None, ""))
        verdict = audit_runner(index, r, tree.label, sweep, policy)
        verdict.path_why = why_not
        out.append(verdict)
    return out
