"""The coverage invariant judged on the engine's own block tables, not on a width alone.

For a config and a batch of admitted requests, the release's ``BlockTables``
(widths from its executed sizing, or given) receive each request's
cross-attention block ids in its row, apply the staged writes, gather the
step's rows and map every encoder position to a slot with the release's
kernel. Coverage holds when every position's slot is the cell its own block
names (``id * kbs + offset`` on the unsharded cross path, spec invariant 1 and 3)
and no row counts more entries than it holds. Requests are placed in the last
rows of the table, so a row that is too short spills past the tensor: on the
real code that is a read and a write past the allocation, which may kill the
worker (reported as :class:`~crossattn_sizing.engine.client.EngineCrash`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crossattn_sizing.core import admission
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.policies import policy_name
from crossattn_sizing.engine.client import EngineCrash
from crossattn_sizing.engine.vllm.adapters import VllmPolicy, run_block_tables


@dataclass(frozen=True)
class EngineCoverage:
    """What the engine's tables did with one batch; ``problems`` empty means coverage held."""

    spec: str
    group: int
    widths: tuple[int, ...]
    rows: tuple[int, ...]
    problems: tuple[str, ...]
    crashed: bool = False

    @property
    def holds(self) -> bool:
        """Whether the engine's tables covered every request."""
        return not self.problems


def block_ids(counts: Sequence[int]) -> list[list[int]]:
    """Distinct ids >= 1 (0 is the null block), interleaved between requests so a spill is visible."""
    ids: list[list[int]] = [[] for _ in counts]
    next_id = 1
    for k in range(max(counts, default=0)):
        for r, n in enumerate(counts):
            if k < n:
                ids[r].append(next_id)
                next_id += 1
    return ids


def engine_coverage(
    policy: VllmPolicy,
    config: RunnerConfig,
    encoder_lens: Sequence[int],
    *,
    first_row: int | None = None,
) -> EngineCoverage:
    """Run the batch through the release's block tables and judge each encoder position's slot.

    Each group's row length in manager blocks is what the release's sizing
    computed. Requests take rows ``first_row ..`` (default: the last rows of the table).
    """
    sizing = policy.sizing(config)
    blocks = list(sizing["blocks"])
    g = config.cross_groups()[0]
    group = config.groups[g]
    n = len(encoder_lens)
    if n > config.max_num_reqs:
        raise ValueError(f"{n} requests do not fit max_num_reqs={config.max_num_reqs}")
    start = config.max_num_reqs - n if first_row is None else first_row
    rows = list(range(start, start + n))
    counts = [admission.blocks_allocated(config, group, e) for e in encoder_lens]
    ids = block_ids(counts)
    per_group = len(config.groups)
    appends = [(row, [ids[i] if gi == g else [] for gi in range(per_group)]) for i, row in enumerate(rows)]
    positions = [list(range(e)) for e in encoder_lens]
    widths = tuple(b * grp.bpk for b, grp in zip(blocks, config.groups, strict=True))
    try:
        assert policy.worker is not None
        result = run_block_tables(
            policy.worker,
            block_sizes=[grp.block_size for grp in config.groups],
            kernel_block_sizes=[grp.kbs for grp in config.groups],
            max_num_blocks_per_group=blocks,
            max_num_reqs=config.max_num_reqs,
            max_num_batched_tokens=max(sum(encoder_lens), 1),
            appends=appends,
            steps=[{"idx_mapping": rows, "positions": positions}],
        )
    except EngineCrash as exc:
        died = (f"the engine's process died: {exc}",)
        return EngineCoverage(policy.spec, g, widths, tuple(rows), died, crashed=True)
    if "refused" in result:
        refused = (f"the engine refused the append: {result['refused']}",)
        return EngineCoverage(policy.spec, g, widths, tuple(rows), refused)
    problems: list[str] = []
    width = widths[g]
    slots = result["steps"][0]["slots"][g]
    offset = 0
    kbs, bpk = group.kbs, group.bpk
    for i, (row, e) in enumerate(zip(rows, encoder_lens, strict=True)):
        entries = [b * bpk + k for b in ids[i] for k in range(bpk)]
        count = result["num_blocks"][g][row]
        if count > width:
            problems.append(
                f"request {i} (row {row}): {count} entries appended to a row of {width}; "
                f"{count - width} spill past the row"
            )
        mine = slots[offset : offset + e]
        offset += e
        wrong = [p for p in range(e) if mine[p] != entries[p // kbs] * kbs + p % kbs]
        if wrong:
            p = wrong[0]
            problems.append(
                f"request {i} (row {row}, {e} encoder tokens): {len(wrong)} positions map to the wrong "
                f"cell, first position {p}: slot {mine[p]}, expected {entries[p // kbs] * kbs + p % kbs}"
            )
    return EngineCoverage(policy.spec, g, widths, tuple(rows), tuple(problems))


def coverage_lines(policy: Any, scenario: Any) -> list[str]:
    """``reproduce --engine vllm==X``: the scenario's request through the release's own BlockTables and
    kernel, beside another request and in the last row (``scenario`` a
    :class:`~crossattn_sizing.models.adapters.ModelScenario`)."""
    config = scenario.config.replace(max_num_reqs=max(scenario.config.max_num_reqs, 2))
    e = scenario.encoder_len.value
    if not config.cross_groups():
        return []
    lines = []
    for where, lens, first in (("in row 0, row 1 in use", [e, 1], 0), ("in the last row", [e], None)):
        result = engine_coverage(policy, config, lens, first_row=first)
        verdict = "holds" if result.holds else ("CRASHED" if result.crashed else "FAILS")
        lines.append(f"engine:    {policy_name(policy)} BlockTables + slot-mapping kernel, request {where}: "
                     f"{verdict}")
        lines += [f"           {p}" for p in result.problems]
    return lines
