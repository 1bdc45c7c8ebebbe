"""Scenarios the attention properties run: engine steps through the implementation, and the oracle's answer.

A scenario allocates block ids from the reference's :class:`BlockPool` (unique,
non-monotonic), appends them to the implementation's block tables in
scheduling order, writes every token's distinct key and value by slot into
NaN-poisoned caches, and attends (``runner_factory``: DCP ranks in this
process, or in ``torch.distributed`` workers, see
:mod:`crossattn_sizing.distributed`). The expected output is dense attention over
the request's own keys and values, computed by the reference in float64: paged
attention must equal it (spec invariant 7), whatever the block ids.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import torch

from crossattn_sizing.core import admission
from crossattn_sizing.core.config import GroupKind, RunnerConfig
from crossattn_sizing.core.policies import Policy, policy_name
from crossattn_sizing.distributed.backend import RunnerFactory
from crossattn_sizing.impl import Impl
from crossattn_sizing.impl.block_table import expand_block_ids
from crossattn_sizing.impl.runner import CrossMode, PagedRunner, Reads
from crossattn_sizing.runs.example_memo import memoised

from .impl_assertions import RequestReport
from .impl_strategies import (
    UNIT,
    AttentionShape,
    ContentScales,
    CrossCase,
    SelfCase,
    make_content,
    pool_size,
)
from .oracle import BlockPool
from .oracle import attention as reference_attention


@dataclass
class ScenarioRun:
    """What an attention scenario produced, and what the oracle says it should be.

    ``mass`` is ``sum_i p_i |v_i|`` per output element (the oracle's attention
    over ``|v|``): the scale of the fp32 rounding in a weighted sum, which the
    tolerance is relative to when values are large and cancel. ``score_abs``
    bounds ``sum_d |q_d k_d| * scale`` over the scenario, and ``num_keys`` is
    the most keys one query sees: the two other sources of fp32 error.
    """

    out: torch.Tensor
    expected: torch.Tensor
    query_owner: list[int]
    query_position: list[int]
    reports: list[RequestReport]
    header: list[str]
    mass: torch.Tensor | None = None
    score_abs: float = 0.0
    num_keys: int = 0


def _score_abs(queries: list[torch.Tensor], keys: list[torch.Tensor], scale: float) -> float:
    """The largest ``sum_d |q_d k_d| * scale`` between any query and key of the same request."""
    best = 0.0
    for q, k in zip(queries, keys, strict=True):
        if q.numel() and k.numel():
            qa, ka = q.to(torch.float64).abs(), k.to(torch.float64).abs()
            best = max(best, float(torch.einsum("qhd,khd->qhk", qa, ka).max()) * scale)
    return best


def _seed(base: int, *parts: int) -> int:
    """A per-request, per-tensor seed derived from the drawn one."""
    h = base
    for p in parts:
        h = (h * 1_000_003 + p + 1) % (2**32)
    return h


def _exact(tensor: torch.Tensor) -> tuple[str, tuple[int, ...], bytes]:
    """A tensor's dtype, shape and every value (float64 holds each input dtype's values exactly)."""
    values = tensor.detach().to("cpu", torch.float64).contiguous()
    return str(tensor.dtype), tuple(tensor.shape), values.numpy().tobytes()


def dense_reference(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float
) -> torch.Tensor:
    """The oracle's dense attention per head, in float64: ``[nq, H, D]``.

    Called with ``values.abs()`` it gives the mass ``sum_i p_i |v_i|`` the tolerance scales with.
    It depends on the example's contents alone, not on the widths: in verify's shared run the
    example's bodies for policies with other widths read the first one's (the memo's key is every
    input of the call, exactly), each a copy, so no body can alter what the next one reads.
    """
    def key() -> Hashable:
        return "dense_reference", _exact(query), _exact(keys), _exact(values), float(scale).hex()

    return memoised(key, lambda: _dense_reference(query, keys, values, scale)).clone()


def _dense_reference(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float
) -> torch.Tensor:
    """:func:`dense_reference`, computed: the reference's attention for each head."""
    heads = query.shape[1]
    per_head = []
    for h in range(heads):
        out, _ = reference_attention(
            query[:, h].to(torch.float64).tolist(),
            keys[:, h].to(torch.float64).tolist(),
            values[:, h].to(torch.float64).tolist(),
            scale,
        )
        per_head.append(torch.tensor(out, dtype=torch.float64).reshape(query.shape[0], query.shape[2]))
    return torch.stack(per_head, dim=1)


def scenario_header(
    title: str, impl: Impl, policy: Policy, config: RunnerConfig, widths: tuple[int, ...], guarded: bool,
    shape: AttentionShape, extra: str = "",
) -> list[str]:
    """The lines every output diagnosis starts with."""
    mode = "guarded" if guarded else "unguarded (engine-faithful: ids past a row spill into the next row)"
    return [
        title,
        f"  implementation {impl.name} on {impl.device}, block tables {mode}{extra}",
        f"  sizing policy {policy_name(policy)}",
        f"  config: {config.describe()}",
        f"  widths: {widths} entries per group; heads={shape.num_heads} head_dim={shape.head_dim} "
        f"dtype={str(shape.dtype).removeprefix('torch.')}",
    ]


def run_cross(
    impl: Impl,
    policy: Policy,
    config: RunnerConfig,
    widths: tuple[int, ...],
    case: CrossCase,
    shape: AttentionShape,
    seed: int,
    pool_seed: int,
    *,
    guarded: bool,
    mode: CrossMode,
    scales: ContentScales = UNIT,
    runner_factory: RunnerFactory = PagedRunner,
) -> ScenarioRun:
    """One prefill step (encoder K/V written once) and one decode step of cross-attention.

    Raises :class:`~crossattn_sizing.base.errors.CapacityError` when the guarded table refuses.
    """
    g = config.cross_groups()[0]
    group = config.groups[g]
    lens = list(case.encoder_lens)
    num_blocks = pool_size(config, group, lens, slack=2)
    pool = BlockPool(num_blocks, seed=pool_seed)
    runner = runner_factory(
        config, widths, impl, num_blocks=num_blocks, num_heads=shape.num_heads,
        head_dim=shape.head_dim, dtype=shape.dtype, guarded=guarded, cross_mode=mode,
    )
    given: list[list[int]] = []
    # All new requests' ids are appended before the step's slot mapping, as in the engine.
    for row, e in zip(case.rows, lens, strict=True):
        ids = pool.allocate(admission.blocks_allocated(config, group, e))
        given.append(expand_block_ids(ids, group.bpk))
        runner.append(g, row, ids)
    keys = [make_content(_seed(seed, i, 0), e, shape, scales.qk) for i, e in enumerate(lens)]
    decades = scales.value_decades
    values = [make_content(_seed(seed, i, 1), e, shape, decades=decades) for i, e in enumerate(lens)]
    queries = [
        make_content(_seed(seed, i, 2), nq, shape, spread=2.0 * scales.qk)
        for i, nq in enumerate(case.num_queries)
    ]
    runner.write(g, case.rows, [range(e) for e in lens], keys, values)
    out = runner.attend(g, Reads.cross(case.rows, queries, lens))
    triples = list(zip(queries, keys, values, strict=True))
    expected = torch.cat([dense_reference(q, k, v, runner.scale) for q, k, v in triples])
    mass = torch.cat([dense_reference(q, k, v.abs(), runner.scale) for q, k, v in triples])
    per_entry = group.kbs * (config.dcp_size if mode == "sharded" else 1)
    reports = [
        RequestReport(i, row, e, per_entry, widths[g], given[i], runner.tables[g].row(row))
        for i, (row, e) in enumerate(zip(case.rows, lens, strict=True))
    ]
    owner = [i for i, nq in enumerate(case.num_queries) for _ in range(nq)]
    header = scenario_header(
        "paged cross-attention differs from dense attention over each request's own encoder keys",
        impl, policy, config, widths, guarded, shape, extra=f", cross-attention {mode}",
    )
    header.append(f"  group {g} (cross, bs={group.block_size}, kbs={group.kbs}): {widths[g]} entries "
                  f"= {widths[g] * per_entry} encoder tokens per row")
    return ScenarioRun(out, expected, owner, [0] * len(owner), reports, header, mass,
                       _score_abs(queries, keys, runner.scale), max(lens))


def run_self(
    impl: Impl,
    policy: Policy,
    config: RunnerConfig,
    widths: tuple[int, ...],
    case: SelfCase,
    shape: AttentionShape,
    seed: int,
    pool_seed: int,
    *,
    guarded: bool,
    scales: ContentScales = UNIT,
    runner_factory: RunnerFactory = PagedRunner,
) -> ScenarioRun:
    """A prefill step (all prompt tokens, causal) and a decode step, on every DCP rank, merged.

    Blocks are allocated as the scheduler does, per step: the prompt's blocks
    first, one more only if the decode token starts a new (virtual) block.
    """
    g = next(i for i, grp in enumerate(config.groups) if grp.kind is GroupKind.FULL)
    group = config.groups[g]
    totals = [s + int(d) for s, d in zip(case.prompt_lens, case.decode, strict=True)]
    num_blocks = pool_size(config, group, totals, slack=2)
    pool = BlockPool(num_blocks, seed=pool_seed)
    runner = runner_factory(
        config, widths, impl, num_blocks=num_blocks, num_heads=shape.num_heads,
        head_dim=shape.head_dim, dtype=shape.dtype, guarded=guarded,
    )
    given: list[list[int]] = [[] for _ in case.rows]
    keys = [make_content(_seed(seed, i, 0), n, shape, scales.qk) for i, n in enumerate(totals)]
    decades = scales.value_decades
    values = [make_content(_seed(seed, i, 1), n, shape, decades=decades) for i, n in enumerate(totals)]
    queries = [make_content(_seed(seed, i, 2), n, shape, 2.0 * scales.qk) for i, n in enumerate(totals)]

    for i, (row, s) in enumerate(zip(case.rows, case.prompt_lens, strict=True)):
        ids = pool.allocate(admission.blocks_allocated(config, group, s))
        given[i] += expand_block_ids(ids, group.bpk)
        runner.append(g, row, ids)
    prompts = [range(s) for s in case.prompt_lens]
    runner.write(g, case.rows, prompts, [k[:s] for k, s in zip(keys, case.prompt_lens, strict=True)],
                 [v[:s] for v, s in zip(values, case.prompt_lens, strict=True)])
    prefill_queries = [q[:s] for q, s in zip(queries, case.prompt_lens, strict=True)]
    outs = [runner.attend(g, Reads(case.rows, prefill_queries, prompts, case.prompt_lens, causal=True))]
    owner = [i for i, s in enumerate(case.prompt_lens) for _ in range(s)]
    position = [p for s in case.prompt_lens for p in range(s)]

    dec = [i for i, d in enumerate(case.decode) if d]
    if dec:
        for i in dec:
            s = case.prompt_lens[i]
            before = admission.blocks_allocated(config, group, s)
            extra = admission.blocks_allocated(config, group, s + 1) - before
            ids = pool.allocate(extra)
            given[i] += expand_block_ids(ids, group.bpk)
            runner.append(g, case.rows[i], ids)
        rows = [case.rows[i] for i in dec]
        pos = [[case.prompt_lens[i]] for i in dec]
        runner.write(g, rows, pos, [keys[i][p] for i, p in zip(dec, pos, strict=True)],
                     [values[i][p] for i, p in zip(dec, pos, strict=True)])
        decode_queries = [queries[i][p] for i, p in zip(dec, pos, strict=True)]
        outs.append(runner.attend(g, Reads(rows, decode_queries, pos, [totals[i] for i in dec], causal=True)))
        owner += dec
        position += [p[0] for p in pos]

    seen = [
        (queries[i][p : p + 1], keys[i][: p + 1], values[i][: p + 1])
        for i, p in zip(owner, position, strict=True)
    ]
    expected = torch.cat([dense_reference(q, k, v, runner.scale) for q, k, v in seen])
    mass = torch.cat([dense_reference(q, k, v.abs(), runner.scale) for q, k, v in seen])
    per_entry = admission.tokens_per_entry(config, group)
    reports = [
        RequestReport(i, row, n, per_entry, widths[g], given[i], runner.tables[g].row(row))
        for i, (row, n) in enumerate(zip(case.rows, totals, strict=True))
    ]
    header = scenario_header(
        "paged causal self-attention (DCP ranks merged by log-sum-exp) differs from dense attention",
        impl, policy, config, widths, guarded, shape,
    )
    return ScenarioRun(torch.cat(outs), expected, owner, position, reports, header, mass,
                       _score_abs(queries, keys, runner.scale), max(totals))
