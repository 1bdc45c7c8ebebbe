"""Findings: engine behaviour the harness models and reports alongside the verdicts.

The one modelled here is the cross-attention DCP inconsistency of
docs/spec.md. With decode context parallelism (``C > 1``) the sizing divides
a cross-attention row's width by ``C`` (each rank would hold its share of the
encoder tokens), and the KV-cache manager allocates ``cdiv(e, bs*C)`` blocks
accordingly, but the engine's cross-attention write and read path ignores DCP:
encoder token ``p`` uses column ``p // kbs`` on every rank. So a long enough
encoder input needs more columns than the row has, under the fixed sizing
(``mrv2``) too. The consistent (sharded) layout fits the same row.

:func:`dcp_cross_attention_finding` searches for the smallest such case with
Hypothesis and proves it on the implementation's own path: the guarded block
table refuses the engine-faithful slot lookup, while the sharded lookup
passes. ``verify`` lists it through :func:`all_findings`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from crossattn_sizing import admission, capacity
from crossattn_sizing.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.errors import CapacityError
from crossattn_sizing.impl import TorchImpl
from crossattn_sizing.policies import BUILTIN_POLICIES, Policy, checked_widths, policy_name
from crossattn_sizing.runner import CrossMode, PagedRunner

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


def faithful_cross_overflow(
    config: RunnerConfig, widths: tuple[int, ...], encoder_len: int
) -> CapacityError | None:
    """The guarded table's refusal of the engine's unsharded lookup, or None if it fits.

    A refusal of the *append* is not this finding (the row is too short for its
    own sharded allocation: a capacity failure of the policy), so it returns None.
    """
    try:
        _run_cross_lookup(config, widths, encoder_len, "faithful")
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


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def dcp_cross_cases(draw: st.DrawFn) -> tuple[RunnerConfig, int]:
    """An encoder-decoder config with ``C > 1`` and one cross group, and an admitted encoder length."""
    m = draw(st.integers(1, 4096), label="max_model_len")
    budget = draw(st.one_of(st.none(), st.integers(1, 8192)), label="max_num_encoder_input_tokens")
    source = draw(st.one_of(st.none(), st.integers(0, 4096)), label="max_source_positions")
    b = max(m, budget or 0) + draw(st.integers(0, 1024), label="batched_tokens_above_needed")
    c = draw(st.integers(2, 8), label="dcp_size")
    bs = draw(st.sampled_from((16, 1, 2, 8, 32, 64, 128, 256, 48, 96)), label="block_size")
    kbs = draw(st.sampled_from(_divisors(bs)[::-1]), label="kernel_block_size")
    interleave = draw(st.sampled_from(_divisors(kbs)), label="dcp_interleave")
    config = RunnerConfig(
        max_model_len=m,
        max_num_batched_tokens=b,
        max_num_encoder_input_tokens=budget,
        max_source_positions=source,
        dcp_size=c,
        dcp_interleave=interleave,
        max_num_reqs=1,
        groups=(KVCacheGroup(GroupKind.CROSS, bs, kbs),),
    )
    e = draw(st.integers(1, admission.encoder_bound(config)), label="encoder_len")
    return config, e


def dcp_cross_attention_finding(policy: Policy, max_examples: int = 2000) -> DcpCrossAttentionFinding | None:
    """The smallest case where the engine's unsharded cross path overflows ``policy``'s width.

    Deterministic (derandomized, no database), so ``verify`` lists the same
    example every run. None when the search finds no such case (a policy that
    sizes cross rows for the unsharded path).
    """

    def overflows(case: tuple[RunnerConfig, int]) -> bool:
        config, e = case
        return faithful_cross_overflow(config, checked_widths(policy, config), e) is not None

    try:
        config, e = find(
            dcp_cross_cases(),
            overflows,
            settings=settings(
                max_examples=max_examples,
                derandomize=True,
                database=None,
                # Its own phases: the loaded profile's (``replay`` has no generation) must not apply.
                phases=(Phase.generate, Phase.shrink),
                deadline=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
    except NoSuchExample:
        return None
    widths = checked_widths(policy, config)
    err = faithful_cross_overflow(config, widths, e)
    assert err is not None  # find returned a case satisfying the condition
    g = config.cross_groups()[0]
    need = capacity.demand(config, config.groups[g], e)
    return DcpCrossAttentionFinding(
        policy=policy_name(policy),
        config=config,
        group=g,
        encoder_len=e,
        needed=err.needed,
        width=widths[g],
        allocated=need.received,
        sharded_needed=need.needed,
        first_position=err.first_position,
    )


def all_findings() -> list[DcpCrossAttentionFinding]:
    """The findings ``verify`` reports, judged against the fixed sizing (``mrv2``)."""
    found = dcp_cross_attention_finding(BUILTIN_POLICIES["mrv2"])
    return [found] if found is not None else []
