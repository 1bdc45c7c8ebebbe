"""Findings: engine behaviour the harness models and reports alongside the verdicts.

The one modelled here is the cross-attention DCP inconsistency of
docs/spec.md. With decode context parallelism (``C > 1``) the sizing divides
a cross-attention row's width by ``C`` (each rank would hold its share of the
encoder tokens), and the KV-cache manager allocates ``cdiv(e, bs*C)`` blocks
accordingly, but the engine's cross-attention write and read path ignores DCP:
encoder token ``p`` uses column ``p // kbs`` on every rank. So a long enough
encoder input needs more columns than the row has, under the fixed sizing
(``mrv2``) too. The consistent (sharded) layout fits the same row.

:func:`dcp_cross_attention_finding` finds the smallest such case on a fixed
grid of configs (a pure function: the same answer every run, no random
search inside the package) and proves it on the implementation's own path:
the guarded block table refuses the engine's unsharded slot lookup, while the
sharded lookup passes. ``verify`` lists it through :func:`all_findings`. The
property suite draws wider cases of the same shape
(``properties/test_dcp_finding.py``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass

from crossattn_sizing.base.errors import CapacityError
from crossattn_sizing.core import admission, capacity
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.core.policies import BUILTIN_POLICIES, Policy, checked_widths, policy_name
from crossattn_sizing.findings.graph_capture import graph_capture_finding
from crossattn_sizing.findings.results import Finding
from crossattn_sizing.impl import TorchImpl
from crossattn_sizing.impl.runner import CrossMode, PagedRunner

TITLE = (
    "cross-attention ignores DCP: the engine's unsharded path needs more columns than a row sized "
    "for C ranks"
)


class FindingWarning(UserWarning):
    """Emitted by the finding tests so a passing suite still shows what was found."""


@dataclass(frozen=True)
class DcpCrossAttentionFinding:
    """The shrunk example of the DCP cross-attention inconsistency under one policy.

    ``needed`` is the entries the engine's path reads (``cdiv(e, kbs)``), ``width``
    the entries the policy gives the row, ``allocated`` the entries the row
    receives (``cdiv(e, bs*C) * bpk``), ``sharded_needed`` what the consistent
    layout reads (``cdiv(e, kbs*C)``).
    """

    policy: str
    config: RunnerConfig
    group: int
    encoder_len: int
    needed: int
    width: int
    allocated: int
    sharded_needed: int
    first_position: int

    @property
    def title(self) -> str:
        """The finding's title in reports."""
        return TITLE

    @property
    def detail(self) -> str:
        """Several lines: the example, the numbers, and how the sharded layout differs."""
        cfg = self.config
        group = cfg.groups[self.group]
        return "\n".join(
            [
                f"under sizing policy {self.policy}, with DCP size C={cfg.dcp_size} "
                f"(interleave {cfg.dcp_interleave}), group {self.group} (cross, bs={group.block_size}, "
                f"kbs={group.kbs}) gets {self.width} row entries;",
                f"a request with {self.encoder_len} encoder tokens receives {self.allocated} entries "
                f"(cdiv(e, bs*C) blocks) but the engine's cross-attention path maps token p to column "
                f"p // kbs on every rank and reads {self.needed}: tokens from {self.first_position} "
                "have no column (the guarded table refuses; the engine reads another row).",
                f"the consistent sharded layout reads {self.sharded_needed} entries and fits.",
                f"config: {cfg.describe()}",
                f"config json: {json.dumps(cfg.to_dict(), separators=(',', ':'), sort_keys=True)}",
            ]
        )


def _run_cross_lookup(
    config: RunnerConfig, widths: tuple[int, ...], encoder_len: int, mode: CrossMode
) -> None:
    """Allocate and append one request's cross blocks, then map its encoder tokens (guarded)."""
    g = config.cross_groups()[0]
    group = config.groups[g]
    blocks = admission.blocks_allocated(config, group, encoder_len)
    runner = PagedRunner(
        config, widths, TorchImpl("cpu"), num_blocks=blocks + 1, num_heads=1, head_dim=1,
        guarded=True, cross_mode=mode,
    )
    runner.append(g, 0, list(range(1, blocks + 1)))
    for rank in runner.ranks(g):
        runner.slot_mapping(g, rank, [0], [range(encoder_len)])


def unsharded_cross_overflow(
    config: RunnerConfig, widths: tuple[int, ...], encoder_len: int
) -> CapacityError | None:
    """The guarded table's refusal of the engine's unsharded lookup, or None if it fits.

    A refusal of the *append* is not this finding (the row is too short for its
    own sharded allocation: a capacity failure of the policy), so it returns None.
    """
    try:
        _run_cross_lookup(config, widths, encoder_len, "unsharded")
    except CapacityError as err:
        return err if err.access == "lookup" else None
    return None


def sharded_cross_refusal(
    config: RunnerConfig, widths: tuple[int, ...], encoder_len: int
) -> CapacityError | None:
    """The guarded table's refusal of the consistent sharded layout (append or lookup), or None."""
    try:
        _run_cross_lookup(config, widths, encoder_len, "sharded")
    except CapacityError as err:
        return err
    return None


def sharded_cross_fits(config: RunnerConfig, widths: tuple[int, ...], encoder_len: int) -> bool:
    """Whether the consistent sharded layout maps every encoder token within the row, on every rank."""
    return sharded_cross_refusal(config, widths, encoder_len) is None


SEARCH_DCP_SIZES = (2, 3, 4, 8)
SEARCH_BLOCK_SIZES = (16, 1, 2, 8, 32, 48, 64, 96, 128, 256)
SEARCH_MODEL_LENS = (1, 2048)
SEARCH_SOURCE_POSITIONS = (None, 1500)
SEARCH_BUDGETS = (None, *(2**k for k in range(13)), *(2**k + 1 for k in range(1, 13)))
"""The grid the finding is looked for in: every DCP size and block size the properties draw
from, kernel blocks and interleaves dividing them, and ladders of ``M``, ``S`` and ``E``."""


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def search_configs() -> Iterator[RunnerConfig]:
    """Every one-cross-group config of the search grid, ``B`` the least the config admits."""
    for c, bs, m, source, budget in itertools.product(
        SEARCH_DCP_SIZES, SEARCH_BLOCK_SIZES, SEARCH_MODEL_LENS, SEARCH_SOURCE_POSITIONS, SEARCH_BUDGETS
    ):
        for kbs in _divisors(bs):
            for interleave in _divisors(kbs):
                yield RunnerConfig(
                    max_model_len=m,
                    max_num_batched_tokens=max(m, budget or 0),
                    max_num_encoder_input_tokens=budget,
                    max_source_positions=source,
                    dcp_size=c,
                    dcp_interleave=interleave,
                    max_num_reqs=1,
                    groups=(KVCacheGroup(GroupKind.CROSS, bs, kbs),),
                )


def _size(config: RunnerConfig, encoder_len: int) -> tuple[int, ...]:
    """The order "smallest" means: fewest encoder tokens, then the plainest config."""
    group = config.groups[0]
    return (
        encoder_len, config.dcp_size, config.dcp_interleave, group.block_size != 16, group.block_size,
        -group.kbs, config.max_model_len, config.max_num_batched_tokens,
        config.max_num_encoder_input_tokens is not None, config.max_source_positions is not None,
        config.source_positions,
    )  # fmt: skip


def dcp_cross_attention_finding(policy: Policy) -> DcpCrossAttentionFinding | None:
    """The smallest case of the search grid where the engine's unsharded cross path overflows ``policy``.

    A pure function of the policy, with no random search: for each config the
    first encoder length whose unsharded lookup needs one column more than the
    row has is ``width * kbs + 1``; the admitted ones are tried smallest first
    on the implementation's own guarded path, and the first the guarded table
    refuses is the finding. None when no config of the grid has such a case (a
    policy that sizes cross rows for the unsharded path).
    """
    candidates = []
    for config in search_configs():
        widths = checked_widths(policy, config)
        e = widths[0] * config.groups[0].kbs + 1
        if admission.admits(config, e):
            candidates.append((_size(config, e), config, widths, e))
    candidates.sort(key=lambda c: c[0])
    for _, config, widths, e in candidates:
        err = unsharded_cross_overflow(config, widths, e)
        if err is None:  # the row is too short for its own sharded allocation: a capacity failure instead
            continue
        need = capacity.demand(config, config.groups[0], e)
        return DcpCrossAttentionFinding(
            policy=policy_name(policy),
            config=config,
            group=0,
            encoder_len=e,
            needed=err.needed,
            width=widths[0],
            allocated=need.received,
            sharded_needed=need.needed,
            first_position=err.first_position,
        )
    return None


def all_findings() -> list[Finding]:
    """The findings ``verify`` reports, as the report's :class:`Finding`: the DCP one judged against the
    fixed sizing (``mrv2``), and the CUDA-graph capture one (:mod:`crossattn_sizing.findings.graph_capture`),
    which no width changes."""
    found = [dcp_cross_attention_finding(BUILTIN_POLICIES["mrv2"]), graph_capture_finding()]
    return [Finding(f.title, f.detail) for f in found if f is not None]
