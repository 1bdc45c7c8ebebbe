"""How far a too-short row moves the cross-attention output, run through the implementation.

The same two requests (equal encoder lengths, different random keys and
values) run twice through :class:`~crossattn_sizing.impl.runner.PagedRunner` with
the implementation under test: once with rows sized for what they need (the
correct run) and once with the policy's widths, unguarded, as the engine runs
in 0.24/0.25. Two requests, because a row that spills writes into its
neighbour's row: request 0's tail columns then name request 1's blocks, and its
attention reads request 1's keys and values. The guarded run of the same
widths shows what the harness refuses, and where, before any kernel runs.

Only the unsharded single-rank cross path is simulated (``dcp_size == 1``);
with DCP the engine's cross path ignores the sharding and is reported as a
finding elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from crossattn_sizing.base.errors import CapacityError
from crossattn_sizing.core import admission
from crossattn_sizing.core.config import RunnerConfig

NUM_HEADS = 2
HEAD_DIM = 8
NUM_REQUESTS = 2


@dataclass(frozen=True)
class DriftResult:
    """Per request, the max abs error of the unguarded output against the correct one."""

    errors: tuple[float, ...]
    scale: float  # the correct output's largest magnitude, so an error can be read against it
    guarded_refusal: str | None  # the guarded run's CapacityError, None when it ran
    spilled_entries: int  # row entries request 0 wrote past its width

    @property
    def max_error(self) -> float:
        """The largest error over the compared positions."""
        return max(self.errors)


def _cross_only(config: RunnerConfig, group: int) -> RunnerConfig:
    """The scenario's config with only the cross group and room for two requests."""
    return config.replace(groups=(config.groups[group],), max_num_reqs=max(NUM_REQUESTS, 1))


def _run(config: RunnerConfig, width: int, encoder_len: int, impl, seed: int, guarded: bool):
    import torch

    from crossattn_sizing.impl.runner import PagedRunner, Reads

    group = config.groups[0]
    blocks = admission.blocks_allocated(config, group, encoder_len)
    runner = PagedRunner(
        config,
        (width,),
        impl,
        num_blocks=NUM_REQUESTS * blocks + 1,
        num_heads=NUM_HEADS,
        head_dim=HEAD_DIM,
        guarded=guarded,
    )
    gen = torch.Generator().manual_seed(seed)
    shape = (encoder_len, NUM_HEADS, HEAD_DIM)
    keys = [torch.randn(shape, generator=gen) for _ in range(NUM_REQUESTS)]
    values = [torch.randn(shape, generator=gen) for _ in range(NUM_REQUESTS)]
    queries = [torch.randn((1, NUM_HEADS, HEAD_DIM), generator=gen) for _ in range(NUM_REQUESTS)]
    rows = list(range(NUM_REQUESTS))
    for r in rows:  # the scheduler hands out disjoint ids; 0 is the null block
        runner.append(0, r, list(range(1 + r * blocks, 1 + (r + 1) * blocks)))
    positions = [range(encoder_len)] * NUM_REQUESTS
    runner.write(0, rows, positions, keys, values)
    return runner.attend(0, Reads.cross(rows, queries, [encoder_len] * NUM_REQUESTS))


def output_drift(
    config: RunnerConfig, group: int, width: int, encoder_len: int, impl, seed: int = 0
) -> DriftResult:
    """Run the cross group at ``width`` unguarded and at the needed width; compare the outputs."""
    if config.dcp_size != 1:
        raise ValueError("the drift run models the single-rank cross path only (dcp_size == 1)")
    cross = _cross_only(config, group)
    g = cross.groups[0]
    needed = admission.entries_needed(cross, g, encoder_len)
    received = admission.entries_received(cross, g, encoder_len)
    reference = _run(cross, max(needed, received), encoder_len, impl, seed, guarded=True)
    refusal = None
    try:
        _run(cross, width, encoder_len, impl, seed, guarded=True)
    except CapacityError as exc:  # renumbered: the run had only the cross group, as group 0
        refusal = str(CapacityError(group, exc.row, exc.needed, exc.width, exc.first_position, exc.access))
    drifted = _run(cross, width, encoder_len, impl, seed, guarded=False)
    diff = (drifted.float() - reference.float()).abs()
    errors = tuple(float(diff[r].max()) for r in range(NUM_REQUESTS))  # NaN propagates: a poisoned read
    scale = float(reference.float().abs().max())
    return DriftResult(errors, scale, refusal, max(received - width, 0))
