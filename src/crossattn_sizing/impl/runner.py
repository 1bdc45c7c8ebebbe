"""The engine's per-step sequence on one device, with DCP ranks simulated in one process.

:class:`PagedRunner` holds what a model runner holds for the layers of a
config: per KV-cache group a block table (width from the sizing policy under
test) and an input table the step's rows are gathered into; per attention group
and DCP rank a NaN-poisoned KV cache. A step is the engine's order of work:

1. ``append`` the block ids the scheduler allocated (all new requests first);
2. ``slot_mapping`` of the step's tokens, read through the block table;
3. ``write`` the tokens' keys and values by slot, on each rank;
4. ``attend`` with the step's :class:`Reads`: gather the step's rows, paged
   attention per rank, DCP merge.

With ``rank`` set, the runner holds one DCP rank only (its caches and its copy
of the block tables): a worker process of the distributed backend
(:mod:`crossattn_sizing.distributed`), which exchanges the partials of
:meth:`PagedRunner.partials` with the other ranks through ``torch.distributed``
instead of merging them in one process.

The guard (see :mod:`crossattn_sizing.impl.block_table`) runs on the host before
each kernel launch. The kernels themselves come from the implementation under
test (:mod:`crossattn_sizing.impl`).

Cross-attention groups run in one of two modes:

- ``unsharded`` (default): as the engine, ignoring DCP. Every rank writes and
  reads all ``e`` encoder tokens with ``slot = row[p // kbs]*kbs + p % kbs``;
  since every rank does the same, rank 0 is modelled. With ``C > 1`` the row,
  whose width was divided by ``C``, is too short: the finding of
  :mod:`crossattn_sizing.findings.dcp`.
- ``sharded``: the consistent variant, each rank holding its share of the
  encoder tokens like a self-attention group, partials merged by log-sum-exp.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from crossattn_sizing.base.intmath import cdiv
from crossattn_sizing.core import admission
from crossattn_sizing.core.config import GroupKind, RunnerConfig
from crossattn_sizing.core.slot_layout import PAD_SLOT_ID, SlotLayout, global_position, local_length
from crossattn_sizing.impl import Impl
from crossattn_sizing.impl.attention import resolve_duplicate_slots
from crossattn_sizing.impl.block_table import DeviceBlockTable
from crossattn_sizing.impl.step import AttentionStep, SlotStep, WriteStep

CrossMode = Literal["unsharded", "sharded"]


class InvalidSlots(AssertionError):
    """The implementation's slot mapping produced a slot outside the cache (spec invariant 4).

    Checked on the host before the KV write, because the scatter would write
    out of bounds (on a GPU: silently into other memory). It is an
    ``AssertionError`` so a property reports it as a failed invariant of the
    implementation, not as a crash of the harness.
    """


@dataclass(frozen=True)
class Reads:
    """What one step reads in a group: each request's row, queries and how far it looks.

    Request ``b`` sits in table row ``rows[b]``; its queries ``queries[b]``
    (``[n_b, H, D]``) stand at ``query_positions[b]`` and read the first
    ``seq_lens[b]`` keys, masked causally when ``causal``. One record, so the
    runner, its partials and the distributed driver take the same thing and a
    new field is added once.
    """

    rows: Sequence[int]
    queries: Sequence[torch.Tensor]
    query_positions: Sequence[Sequence[int]]
    seq_lens: Sequence[int]
    causal: bool

    @classmethod
    def cross(
        cls, rows: Sequence[int], queries: Sequence[torch.Tensor], encoder_lens: Sequence[int]
    ) -> Reads:
        """Decoder queries over all of each request's encoder keys (not causal: positions do not matter)."""
        return cls(rows, queries, [[0] * len(q) for q in queries], encoder_lens, causal=False)

    def on_cpu(self) -> Reads:
        """The same reads as plain lists and CPU tensors, to send to another process."""
        return Reads(list(self.rows), [q.cpu() for q in self.queries],
                     [list(p) for p in self.query_positions], list(self.seq_lens), self.causal)


def default_tail(config: RunnerConfig, widths: Sequence[int]) -> int:
    """A tail past the last row long enough for any admitted sequence's spill.

    The longest read a row can see is the unsharded cross path's
    ``cdiv(e, kbs)`` entries for the largest admitted ``e`` (or ``M`` for a
    decoder group); a tail that long keeps the unguarded mode inside the
    modelled allocation, so it shows wrong outputs rather than a refusal.
    """
    longest = max(admission.encoder_bound(config), config.max_model_len)
    smallest_kbs = min(g.kbs for g in config.groups)
    return max(max(widths, default=0), cdiv(longest, smallest_kbs), 1)


def slot_step(
    table: DeviceBlockTable,
    rows: Sequence[int],
    positions: Sequence[Sequence[int] | torch.Tensor],
    layout: SlotLayout,
) -> SlotStep:
    """The :class:`SlotStep` of a step's tokens read through ``table``, flattened as the engine does.

    Request ``b`` sits in table row ``rows[b]`` and brings ``positions[b]``;
    the tensors are on the table's device.
    """
    lens = [len(p) for p in positions]
    qsl = torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32)
    flat = [torch.as_tensor(list(p) if isinstance(p, range) else p, dtype=torch.int64) for p in positions]
    pos = torch.cat(flat) if flat else torch.zeros(0, dtype=torch.int64)
    req_rows = torch.tensor(list(rows), dtype=torch.int32)
    device = table.device
    return SlotStep(
        table=table.storage,
        row_stride=table.width,
        req_rows=req_rows.to(device),
        query_start_loc=qsl.to(device),
        positions=pos.to(device),
        layout=layout,
    )


def compute_slots(
    impl: Impl,
    table: DeviceBlockTable,
    rows: Sequence[int],
    positions: Sequence[Sequence[int] | torch.Tensor],
    layout: SlotLayout,
    pad_to: int | None = None,
) -> torch.Tensor:
    """The implementation's slot mapping of a step, after the table's guard.

    The guard runs on the host first: every request's largest column is checked
    against its row (the width in guarded mode, the modelled allocation always),
    so a refused step launches no kernel. Returns int64 slots padded with -1 to
    ``pad_to`` (default: the number of tokens).
    """
    vbs = layout.virtual_block_size
    for row, pos in zip(rows, positions, strict=True):
        if len(pos):
            last = max(int(p) for p in pos) // vbs
            table.check_lookup(row, last, first_position=table.width * vbs)
    step = slot_step(table, rows, positions, layout)
    n = step.positions.numel()
    out = torch.empty(max(pad_to or n, n), dtype=torch.int64, device=table.device)
    impl.slot_mapping(step=step, out=out)
    return out


class WrongAnswer(AssertionError):
    """A kernel's answer is not of the interface's form (type, shape): the case's failure, said plainly."""


def checked_attention(name: str, answer: object, query: torch.Tensor,
                      value_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(out [Q, H, D], lse [Q, H])`` as paged attention must answer, else :class:`WrongAnswer` saying what.

    Checked before anything reads the answer: a tensor one row short would
    otherwise broadcast, or fail later with an error about something else.
    """
    want = (query.shape[0], query.shape[1], value_cache.shape[-1])
    if not (isinstance(answer, tuple) and len(answer) == 2
            and all(isinstance(t, torch.Tensor) for t in answer)):  # fmt: skip
        kind = type(answer).__name__
        raise WrongAnswer(f"paged attention of {name} returned {kind}, not (out, lse) tensors")
    out, lse = answer
    for part, tensor in (("out", out), ("lse", lse)):
        check_facts(name, "paged attention", part, facts_of(tensor), query.device)
    if tuple(out.shape) != want or tuple(lse.shape) != want[:2]:
        raise WrongAnswer(
            f"paged attention of {name} returned out {list(out.shape)} and lse {list(lse.shape)}; "
            f"expected out {list(want)} and lse {list(want[:2])} (queries, heads, head size)"
        )
    check_finite(name, "paged attention", "out", out, bool(torch.isinf(out).any()))
    check_finite(name, "paged attention", "lse", lse, bool((lse == float("inf")).any()))
    return out, lse


def checked_merge(name: str, answer: object, like: torch.Tensor) -> torch.Tensor:
    """The DCP merge's answer: one fp32 tensor shaped like each rank's ``out``, on its device, no inf."""
    if not isinstance(answer, torch.Tensor):
        raise WrongAnswer(f"merge of {name} returned {type(answer).__name__}, not a tensor")
    check_facts(name, "merge", "out", facts_of(answer), like.device)
    if answer.shape != like.shape:
        raise WrongAnswer(f"merge of {name} returned out {list(answer.shape)}; expected {list(like.shape)}")
    check_finite(name, "merge", "out", answer, bool(torch.isinf(answer).any()))
    return answer


def facts_of(tensor: torch.Tensor) -> dict[str, object]:
    """What is checked of a returned tensor before its values are read, as a worker reports it too."""
    return {"device": str(tensor.device), "dtype": str(tensor.dtype), "shape": list(tensor.shape),
            "requires_grad": bool(tensor.requires_grad)}  # fmt: skip


def check_facts(name: str, method: str, part: str, facts: dict[str, object], device: torch.device) -> None:
    """A returned tensor on ``device``'s kind, fp32, not requiring grad; else :class:`WrongAnswer` naming
    the method, what was expected and what came back (a ``meta`` tensor holds no values at all)."""
    problems = []
    if torch.device(str(facts["device"])).type != device.type:
        problems.append(f"on device {facts['device']} (expected {device.type})")
    if facts["dtype"] != str(torch.float32):
        problems.append(f"of dtype {facts['dtype']} (expected {torch.float32})")
    if facts["requires_grad"]:
        problems.append("requiring grad (expected requires_grad False: a result, not a graph)")
    if problems:
        raise WrongAnswer(f"{method} of {name} returned {part} {' and '.join(problems)}")


def check_finite(name: str, method: str, part: str, tensor: torch.Tensor, infinite: bool) -> None:
    """``infinite``: whether ``tensor`` holds a value no right answer can (an infinite output, an lse of
    +inf); NaN passes, since a poisoned cell read must reach the property that names it."""
    if infinite:
        allowed = "-inf where a query sees no key" if part == "lse" else "finite values"
        raise WrongAnswer(f"{method} of {name} returned {part} with infinite values (expected {allowed}, "
                          "or NaN where a poisoned cell was read)")  # fmt: skip


class PagedRunner:
    """Block tables, caches and the step sequence for one config and one implementation."""

    def __init__(
        self,
        config: RunnerConfig,
        widths: Sequence[int],
        impl: Impl,
        *,
        num_blocks: int,
        num_heads: int = 1,
        head_dim: int = 4,
        dtype: torch.dtype = torch.float32,
        guarded: bool = True,
        cross_mode: CrossMode = "unsharded",
        tail: int | None = None,
        rank: int | None = None,
    ) -> None:
        if len(widths) != len(config.groups):
            raise ValueError(f"{len(widths)} widths for {len(config.groups)} groups")
        if cross_mode not in ("unsharded", "sharded"):
            raise ValueError(f"cross_mode must be unsharded or sharded, got {cross_mode!r}")
        self.config = config
        self.widths = tuple(widths)
        self.impl = impl
        self.device = torch.device(impl.device)
        self.num_blocks = num_blocks
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.guarded = guarded
        self.cross_mode: CrossMode = cross_mode
        if rank is not None and not 0 <= rank < config.dcp_size:
            raise ValueError(f"rank {rank} outside [0, {config.dcp_size})")
        self.rank = rank
        self.scale = 1.0 / math.sqrt(head_dim)
        tail = default_tail(config, widths) if tail is None else tail
        self.tables: list[DeviceBlockTable] = []
        self.inputs: list[DeviceBlockTable] = []
        self.caches: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        for g, group in enumerate(config.groups):
            # The persistent table, and the input table a step's rows are gathered into.
            for tables in (self.tables, self.inputs):
                tables.append(
                    DeviceBlockTable(
                        config.max_num_reqs,
                        widths[g],
                        bpk=group.bpk,
                        tokens_per_entry=admission.tokens_per_entry(config, group),
                        group=g,
                        guarded=guarded,
                        tail=tail,
                        device=self.device,
                    )
                )
            if not group.kind.is_attention:
                continue
            for rank in self.ranks(g):
                shape = (num_blocks * group.bpk, group.kbs, num_heads, head_dim)
                self.caches[(g, rank)] = (
                    torch.full(shape, float("nan"), dtype=dtype, device=self.device),
                    torch.full(shape, float("nan"), dtype=dtype, device=self.device),
                )

    # Layout -----------------------------------------------------------------
    def sharded(self, g: int) -> bool:
        """Whether group ``g`` splits its tokens over the DCP ranks in this run."""
        group = self.config.groups[g]
        if self.config.dcp_factor(group) == 1:
            return False
        return not (group.kind is GroupKind.CROSS and self.cross_mode == "unsharded")

    def ranks(self, g: int) -> range:
        """The DCP ranks of group ``g`` this runner holds (one when replicated, unsharded or ``rank`` set)."""
        if not self.sharded(g):
            return range(1)
        return range(self.config.dcp_size) if self.rank is None else range(self.rank, self.rank + 1)

    def layout(self, g: int, rank: int) -> SlotLayout:
        """The slot layout of group ``g`` on ``rank``."""
        group = self.config.groups[g]
        if self.sharded(g):
            return SlotLayout(group.kbs, self.config.dcp_size, self.config.dcp_interleave, rank)
        return SlotLayout(group.kbs)

    # Step -------------------------------------------------------------------
    def append(self, g: int, row: int, manager_ids: Sequence[int]) -> list[int]:
        """Append allocated manager block ids to ``row`` of group ``g`` (expanded)."""
        return self.tables[g].append(row, manager_ids)

    def slot_mapping(
        self,
        g: int,
        rank: int,
        rows: Sequence[int],
        positions: Sequence[Sequence[int] | torch.Tensor],
        pad_to: int | None = None,
    ) -> torch.Tensor:
        """Slots of the step's tokens in group ``g`` on ``rank``, padded with -1 to ``pad_to``."""
        return compute_slots(self.impl, self.tables[g], rows, positions, self.layout(g, rank), pad_to)

    def write(
        self,
        g: int,
        rows: Sequence[int],
        positions: Sequence[Sequence[int] | torch.Tensor],
        keys: Sequence[torch.Tensor],
        values: Sequence[torch.Tensor],
    ) -> None:
        """Write each request's keys/values (``[len(positions[b]), H, D]``) on every rank of ``g``."""
        key = torch.cat(list(keys)).to(self.device, self.dtype)
        value = torch.cat(list(values)).to(self.device, self.dtype)
        for rank in self.ranks(g):
            slots = self.slot_mapping(g, rank, rows, positions)
            key_cache, value_cache = self.caches[(g, rank)]
            cells = key_cache.shape[0] * key_cache.shape[1]
            bad = (slots < PAD_SLOT_ID) | (slots >= cells)
            if bool(bad.any()):
                t = int(torch.nonzero(bad)[0])
                raise InvalidSlots(
                    f"slot mapping of {self.impl.name} gave slot {int(slots[t])} to token {t} of the step "
                    f"(group {g}, rank {rank}); the cache has cells 0..{cells - 1} (and -1 = pad)"
                )
            self.impl.write_kv(key=key, value=value, key_cache=key_cache, value_cache=value_cache,
                               step=WriteStep(slots=resolve_duplicate_slots(slots)))

    def attend(self, g: int, reads: Reads) -> torch.Tensor:
        """Paged attention of each request's queries over its first ``seq_lens[b]`` tokens.

        Gathers the step's rows into the input table, runs the implementation's
        attention on each rank over the rank's local share, merges the partials
        and returns the output in the run's dtype, ``[sum of queries, H, D]``.
        """
        outs, lses = self.partials(g, reads)
        if len(outs) == 1:
            return outs[0].to(self.dtype)
        merged = checked_merge(self.impl.name, self.impl.merge(outs=outs, lses=lses), outs[0])
        return merged.to(self.dtype)

    def partials(self, g: int, reads: Reads) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Each held rank's fp32 ``(out, lse)`` over its local share of the keys, before the merge."""
        rows, queries, seq_lens = reads.rows, reads.queries, reads.seq_lens
        table, inputs = self.tables[g], self.inputs[g]
        table.gather(rows, into=inputs)
        query = torch.cat(list(queries)).to(self.device, self.dtype)
        lens = [len(q) for q in queries]
        qsl = torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32).to(self.device)
        q_pos = torch.cat([torch.as_tensor(list(p), dtype=torch.int64) for p in reads.query_positions])
        q_pos = q_pos.to(self.device)
        outs: list[torch.Tensor] = []
        lses: list[torch.Tensor] = []
        for rank in self.ranks(g):
            layout = self.layout(g, rank)
            kbs = layout.kernel_block_size
            local = [local_length(s, layout) for s in seq_lens]
            first = global_position(table.width * kbs, layout)
            for b, (row, n) in enumerate(zip(rows, local, strict=True)):
                if n:
                    table.check_lookup(row, (n - 1) // kbs, first_position=first)
                    inputs.check_lookup(b, (n - 1) // kbs, first_position=first)
            key_cache, value_cache = self.caches[(g, rank)]
            step = AttentionStep(
                table=inputs.storage,
                row_stride=inputs.width,
                query_start_loc=qsl,
                seq_lens=torch.tensor(local, dtype=torch.int32, device=self.device),
                query_positions=q_pos,
                layout=layout,
                causal=reads.causal,
                scale=self.scale,
            )
            answer = self.impl.paged_attention(
                query=query, key_cache=key_cache, value_cache=value_cache, step=step
            )
            out, lse = checked_attention(self.impl.name, answer, query, value_cache)
            outs.append(out)
            lses.append(lse)
        return outs, lses
