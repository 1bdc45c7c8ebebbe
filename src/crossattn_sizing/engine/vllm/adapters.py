"""vLLM's own code as a sizing policy and as an implementation: ``vllm==X`` (or ``vllm``, the installed one).

- :class:`VllmPolicy`: the widths ``GPUModelRunner.initialize_kv_cache`` of the
  release computes for a config (its sizing loop, executed), in the entries
  its ``BlockTables`` allocate per row; ``runner="cpu"`` runs 0.34's second
  copy of the loop, ``StandaloneCPUModelRunner``'s.
- :class:`VllmImpl`: the release's own Triton kernels for the four steps (slot
  mapping through its ``BlockTables``, KV write, paged attention through its
  Triton backend at ``C = 1``, merge), over the harness's tables and caches;
  its ``provenance`` names each and what stands in with DCP.
- :func:`run_block_tables`: the release's ``BlockTables`` end to end (append,
  staged writes, gather, slot mapping), for the engine coverage check.

All of it runs in the release's worker process (:mod:`crossattn_sizing.engine.client`).
"""

from __future__ import annotations

import json
import queue
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import torch

from crossattn_sizing.base import interrupts
from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.config_tile import ConfigTile
from crossattn_sizing.engine.client import (
    EngineCrash,
    EngineWorker,
    Inexpressible,
    KernelsCannotRun,
    discard_inexpressible,
    not_run,
    parallel_workers,
    worker_for,
)
from crossattn_sizing.engine.specs import is_engine_spec
from crossattn_sizing.engine.tensors import decode, encode
from crossattn_sizing.engine.vllm.sizing_exec import EXECUTED_RUNNERS
from crossattn_sizing.impl.attention import lse_merge, torch_paged_attention, torch_write_kv
from crossattn_sizing.impl.slot_mapping import global_positions, token_requests
from crossattn_sizing.impl.step import AttentionStep, SlotStep, WriteStep
from crossattn_sizing.prove import Answer
from crossattn_sizing.prove.batches import PackedWidths, packed_arrays
from crossattn_sizing.releases.versions import series_key

FIRST_FIXED = (0, 25, 0)
"""The first release whose V2 sizing includes the encoder budget (PR #46753)."""

BATCH = 1024
"""Configs per ``widths_many`` request: about 250 kB of JSON, under a tenth of a second in a worker
(small enough that the last batch of a tile leaves the other workers idle only briefly)."""

TILE_BATCH = 4096
"""Configs per ``widths_many`` request of a prove tile: 96 kB of packed lengths, about a tenth of a
second in a worker (a tile of 32768 configs is eight requests, so both workers stay busy)."""


def normalise(spec_or_version: str) -> str:
    """``0.24.0``, ``vllm==0.24.0`` -> ``vllm==0.24.0``; ``vllm`` and ``vllm@PATH`` stay."""
    s = spec_or_version.strip()
    return s if is_engine_spec(s) else f"vllm=={s}"


class VllmPolicy:
    """The sizing of a vLLM release, executed. Widths are cached per config (they are pure)."""

    def __init__(
        self, spec: str, device: str = "cpu", worker: EngineWorker | None = None, runner: str = "v2",
        deadline: float | None = None,
    ) -> None:
        """``runner``: whose copy of the sizing runs, a key of :data:`.sizing_exec.EXECUTED_RUNNERS`;
        ``deadline``: seconds each call into the release may take (``--call-timeout``; None: its setting)."""
        self.spec = normalise(spec)
        self.device = device
        self.runner = runner
        self.worker = worker if worker is not None else worker_for(self.spec, device, deadline=deadline)
        self.worker.start()
        self.version: str | None = self.worker.ready.get("version")
        self._cache: dict[str, dict[str, Any]] = {}
        self._siblings: list[EngineWorker] = []

    def __repr__(self) -> str:  # short: Hypothesis prints it in every falsifying example
        return f"VllmPolicy({self.spec!r})"

    @property
    def name(self) -> str:
        """How reports name the policy: its spec, or the installed version."""
        return self.spec if self.spec != "vllm" else f"vllm (installed {self.version})"

    @property
    def expected_to_hold(self) -> bool:
        """Releases before 0.25.0 carry the pre-fix sizing: their failure is the expected verdict."""
        key = series_key(self.version) if self.version is not None else None
        return key is None or key[:3] >= FIRST_FIXED

    @property
    def summary(self) -> str:
        """What ran, for the report's header: the release and the runner whose sizing executed."""
        return f"vLLM {self.version} {EXECUTED_RUNNERS[self.runner][1]}.initialize_kv_cache, executed"

    def sizing(self, config: RunnerConfig) -> dict[str, Any]:
        """``{"blocks", "widths", "length"}`` as the release's code computed them.

        A release whose sizing ends its worker or does not answer within the deadline raises
        :class:`~crossattn_sizing.engine.client.EngineCrash` naming the config: the config fails.
        """
        key = json.dumps(config.to_dict(), sort_keys=True)
        if key not in self._cache:
            try:
                self._cache[key] = self.worker.ask("widths", config=config.to_dict(), runner=self.runner)
            except Inexpressible as exc:
                discard_inexpressible(f"{self.spec}: {exc}")
                raise
            except EngineCrash as exc:
                raise type(exc)(f"{exc} (asked for the widths of {config.describe()})") from None
        return self._cache[key]

    def startup(self, config: RunnerConfig, capture_sizes: Sequence[int]) -> dict[str, Any]:
        """The release's own start-up batches (profile, warm-up, capture) for ``config``, judged in its
        worker (:func:`.startup.verdict_dict`; ``{"not_run": why}`` for the adapter's gap)."""
        return self.worker.ask("startup", config=config.to_dict(), capture_sizes=list(capture_sizes))

    def __call__(self, config: RunnerConfig) -> tuple[int, ...]:
        """The widths the release's own ``initialize_kv_cache`` gives ``config``."""
        return _widths(self.sizing(config))

    def widths_many(self, configs: Sequence[RunnerConfig]) -> Sequence[Answer]:
        """``self(c)`` for each config, a batch of configs per round trip to a worker (for ``prove``).

        One item per config, in order: its widths, or the error asking about
        it raised (:class:`Inexpressible` or another refusal of the release).
        A prove tile (:class:`ConfigTile`) crosses as its bases and packed
        lengths, :data:`TILE_BATCH` configs a request, and its answer comes back
        packed (:class:`PackedWidths`, every value judged by ``prove``); any
        other list crosses config by config, :data:`BATCH` a request.
        Batches are spread over :func:`parallel_workers` processes of the
        release (this policy's own, then siblings started on first need). A
        batch that kills its worker is asked again one config at a time, each
        crash starting a fresh worker, so the :class:`EngineCrash` is the item
        of the config that caused it; the list ends there (later configs have
        no answer). Nothing is cached: prove asks about each config once.
        """
        batches: list[Sequence[RunnerConfig]]
        if isinstance(configs, ConfigTile):
            batches = list(configs.parts(TILE_BATCH))
        else:
            batches = [configs[i : i + BATCH] for i in range(0, len(configs), BATCH)]
        workers = self._workers(len(batches))
        if len(workers) == 1:
            return _joined(_ask(workers[0], b, self.runner) for b in batches)
        free: queue.SimpleQueue[EngineWorker] = queue.SimpleQueue()
        for worker in workers:
            free.put(worker)

        def run(batch: Sequence[RunnerConfig]) -> Sequence[Answer]:
            worker = free.get()
            try:
                return _ask(worker, batch, self.runner)
            finally:
                free.put(worker)

        pool = ThreadPoolExecutor(len(workers), thread_name_prefix="engine-batch")
        try:
            return _joined(pool.map(run, batches))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    @property
    def workers(self) -> list[EngineWorker]:
        """This policy's worker processes: its own, then the siblings parallel batches started."""
        return [self.worker, *self._siblings]

    def end_batches(self) -> None:
        """End the extra processes started for parallel batches (the shared worker stays up).

        ``prove_all`` calls it when done, so a verify over many releases keeps one process per release.
        """
        while self._siblings:
            self._siblings.pop().close()

    def _workers(self, batches: int) -> list[EngineWorker]:
        """This policy's worker, and as many siblings as ``batches`` can keep busy (up to the limit)."""
        want = min(batches, parallel_workers())
        while len(self._siblings) < want - 1:
            self._siblings.append(self.worker.sibling())
        return [self.worker, *self._siblings[: want - 1]]


def _joined(answered: Iterable[Sequence[Answer]]) -> Sequence[Answer]:
    """The batches' answers joined, up to and including the first :class:`EngineCrash`: packed where
    every batch came back packed (:meth:`PackedWidths.joined`), else a list."""
    parts: list[Sequence[Answer]] = []
    for answers in answered:
        parts.append(answers)
        if len(answers) and isinstance(answers[-1], EngineCrash):
            break
    if parts and all(isinstance(p, PackedWidths) for p in parts):
        return PackedWidths.joined(cast("list[PackedWidths]", parts))
    return [a for p in parts for a in p]


def _ask(worker: EngineWorker, batch: Sequence[RunnerConfig], runner: str = "v2") -> Sequence[Answer]:
    """One ``widths_many`` request (a tile's part packed both ways); after a crash, one ``widths``
    request per config until one dies."""
    try:
        if isinstance(batch, ConfigTile):
            packed = worker.request("widths_many", tile=batch.to_dict(), runner=runner)
            lens, flat, rest = packed_arrays(packed)
            return PackedWidths(lens, flat, {i: worker.refusal("widths", a) for i, a in rest.items()})
        configs = [c.to_dict() for c in batch]
        answers = worker.request("widths_many", configs=configs, runner=runner)["results"]
    except EngineCrash:
        out: list[Answer] = []
        for config in batch:
            if interrupts.requested():  # Ctrl-C also ends the workers: asking again would restart them
                raise KeyboardInterrupt from None
            try:
                out.append(_widths(worker.request("widths", config=config.to_dict(), runner=runner)))
            except EngineCrash as exc:
                out.append(exc)
                break
            except ReleaseUnavailable as exc:
                out.append(exc)
        return out
    return [_widths(a["result"]) if a["ok"] else worker.refusal("widths", a) for a in answers]


def _widths(sizing: dict[str, Any]) -> tuple[int, ...]:
    return tuple(int(w) for w in sizing["widths"])


CPU_BF16 = (
    "not run on CPU: Triton's interpreter computes bf16 on the raw stored bits (Triton 3.9), so a "
    "bf16 result would be the interpreter's, not the kernel's"
)
"""Why bf16 cases of the release's kernels get no verdict on a CPU machine (they run on a GPU)."""

INTERPRETER_REFUSALS = {
    "mask has unsupported dtype": (
        "not run on CPU: Triton 3.9's interpreter refuses this kernel (an integer mask reaches a masked "
        "load: 0.34's slot mapping with DCP > 1), so it has no CPU result"
    ),
}
"""Errors Triton's interpreter raises on kernels that compile on a GPU, and the no-verdict line for each."""

HARNESS_KERNELS = {
    "write_kv": ("crossattn_sizing.impl.attention.torch_write_kv", torch_write_kv),
    "paged_attention": ("crossattn_sizing.impl.attention.torch_paged_attention", torch_paged_attention),
    "merge": ("crossattn_sizing.impl.attention.lse_merge", lse_merge),
}
"""The harness's own kernel that stands in for a step a release has no kernel for."""


MERGE_FALLBACK = (
    "the head size or DCP size is not a power of two: the release's correction kernel spans both with "
    "tl.arange, which takes powers of two only (on a GPU it does not compile either)"
)
"""When the release's two-way merge stands in for its DCP correction (both are the release's code)."""


class VllmImpl:
    """The release's own kernels for all four steps, each run in its worker.

    Slot mapping: its ``BlockTables.compute_slot_mappings``. KV write:
    ``triton_reshape_and_cache_flash``. Paged attention (self and cross):
    at ``C = 1`` the release's Triton backend, as an encoder-decoder model
    runs it (``TritonAttentionMetadataBuilder.build``, then
    ``TritonAttentionImpl.forward``, which calls ``unified_attention``); with
    DCP, which needs each rank's LSE that backend does not return,
    ``decode_attention_fwd`` stands in (the Triton MLA decode kernel, which
    returns it), each query one decode row over the keys it may see (a
    prefix of its request's local keys: its own length for cross-attention,
    the keys at or before its position for self-attention). Merge: the
    release's DCP combination ``cp_lse_ag_out_ar`` (each rank's partial
    corrected against every rank's LSE by ``correct_attn_out``, then summed
    as the all-reduce sums), or ``merge_attn_states`` folding the partials
    two at a time for shapes the correction kernel cannot take (see
    :attr:`notes`) and releases without the DCP path.
    :attr:`provenance` names the function that runs for each step; where
    the release has none, the harness's kernel stands in and the
    provenance and :attr:`name` say so. :attr:`calls` counts the release's
    kernel runs by the function's dotted name as well as by step.
    """

    def __init__(
        self, spec: str, device: torch.device | str = "cpu", worker: EngineWorker | None = None,
        deadline: float | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.spec = normalise(spec)
        self.worker = worker if worker is not None else worker_for(self.spec, self.device.type,
                                                                   deadline=deadline)  # fmt: skip
        found = self.worker.request("kernels")
        self.version = self.worker.ready.get("version")
        self.provenance: dict[str, str] = {}
        self.stand_ins: dict[str, str] = {}
        self.calls: Counter[str] = Counter()
        self.notes: dict[str, str] = {}
        found["provenance"] = dict(found["provenance"])
        self.backend: str | None = found["provenance"].pop("backend", None)
        self.decode_kernel: str | None = found["provenance"].get("paged_attention")
        pairs = found["provenance"].pop("merge_pairs", None)
        if pairs and found["provenance"].get("merge") not in (None, pairs):
            self.notes["merge"] = f"{pairs} where {MERGE_FALLBACK}"
        for step, dotted in found["provenance"].items():
            if dotted:
                self.provenance[step] = dotted
            else:
                name = HARNESS_KERNELS[step][0]
                self.stand_ins[step] = f"vLLM {self.version} has none of {', '.join(found['tried'][step])}"
                self.provenance[step] = f"{name} (harness stand-in: {self.stand_ins[step]})"
        if self.backend and self.decode_kernel:
            self.provenance["paged_attention"] = f"{self.backend} ({BACKEND_PATH}) at C = 1"
            self.notes["paged_attention"] = f"with DCP (C > 1) {self.decode_kernel} {DCP_STAND_IN}"
        own = "all four steps vLLM's kernels" if not self.stand_ins else (
            f"harness stand-in for {', '.join(self.stand_ins)}")
        self.name = f"{self.spec} ({own})"

    def __repr__(self) -> str:  # short: Hypothesis prints it in every falsifying example
        return f"VllmImpl({self.spec!r}, device={str(self.device)!r})"

    def provenance_lines(self) -> list[str]:
        """``step: dotted.name`` per step, for the pytest header and ``verify``."""
        lines = []
        for step in ("slot_mapping", "write_kv", "paged_attention", "merge"):
            note = f"; {self.notes[step]}" if step in self.notes else ""
            lines.append(f"{step}: {self.provenance[step]}{note}")
        return lines

    def _request(self, op: str, **payload: Any) -> dict[str, Any]:
        """A worker request; a refusal by Triton's interpreter (CPU) is no verdict, with the reason.

        :attr:`calls` counts the release's kernel runs per step, so a test can
        tell a property that held on the kernels from one that never reached them.
        """
        try:
            answer = self.worker.ask(op, **payload)
            self.calls[op] += 1
            return answer
        except ReleaseUnavailable as exc:
            if self.device.type == "cpu" and "InterpreterError" in str(exc):
                for text, why in INTERPRETER_REFUSALS.items():
                    if text in str(exc):
                        not_run(why)
                        raise KernelsCannotRun(self.spec, why) from None
            raise

    def _interpreted_bf16(self, *tensors: torch.Tensor) -> None:
        """Refuse a bf16 case on CPU: no verdict (discarded in Hypothesis, an error elsewhere)."""
        if self.device.type == "cpu" and any(t.dtype == torch.bfloat16 for t in tensors):
            not_run(CPU_BF16)
            raise KernelsCannotRun(self.spec, CPU_BF16)

    def slot_mapping(self, *, step: SlotStep, out: torch.Tensor) -> None:
        """Slot mapping by the release's kernel, in its worker."""
        if step.row_stride < 1:
            raise ReleaseUnavailable(
                f"{self.spec}: a block table of width {step.row_stride} has no rows to map through"
            )
        layout = step.layout
        result = self._request(
            "slots",
            storage=step.table.tolist(),
            row_stride=step.row_stride,
            kbs=layout.kernel_block_size,
            dcp_size=layout.dcp_size,
            rank=layout.rank,
            interleave=layout.interleave,
            req_rows=step.req_rows.tolist(),
            qsl=step.query_start_loc.tolist(),
            positions=step.positions.tolist(),
            out_len=out.numel(),
        )
        out.copy_(torch.tensor(result["slots"], dtype=torch.int64, device=out.device))

    def write_kv(
        self, *, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
        step: WriteStep,
    ) -> None:
        """The KV write by the release's kernel (or the torch stand-in where it has none)."""
        if "write_kv" in self.stand_ins:
            torch_write_kv(key=key, value=value, key_cache=key_cache, value_cache=value_cache, step=step)
            return
        self._interpreted_bf16(key, key_cache)
        result = self._request(
            "write_kv", key=encode(key), value=encode(value), key_cache=encode(key_cache),
            value_cache=encode(value_cache), slots=encode(step.slots.to(torch.int64)),
        )  # fmt: skip
        key_cache.copy_(decode(result["key_cache"], key_cache.device))
        value_cache.copy_(decode(result["value_cache"], value_cache.device))

    def paged_attention(
        self, *, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Paged attention by the release's backend or decode kernel (or the torch stand-in)."""
        if "paged_attention" in self.stand_ins:
            return torch_paged_attention(query=query, key_cache=key_cache, value_cache=value_cache, step=step)
        self._interpreted_bf16(query, key_cache)
        num, heads = query.shape[0], query.shape[1]
        if self.backend and step.layout.dcp_size == 1 and engine_positions(step, num):
            result = self._request(
                "backend_attention", query=encode(query.float()), key_cache=encode(key_cache),
                value_cache=encode(value_cache), table=encode(step.table.to(torch.int32)),
                row_stride=step.row_stride, query_start_loc=encode(step.query_start_loc.to(torch.int32)),
                seq_lens=encode(step.seq_lens.to(torch.int32)), causal=step.causal, scale=step.scale,
            )  # fmt: skip
            self.calls["paged_attention"] += 1
            self.calls[self.backend] += 1
            out = decode(result["out"], query.device)
            # unified_attention computes no LSE; at C = 1 nothing reads it (one rank, no merge): NaN, so
            # that a reader would fail loudly rather than use a made-up value.
            return out, torch.full((num, heads), float("nan"), dtype=torch.float32, device=query.device)
        out = torch.zeros(num, heads, value_cache.shape[-1], dtype=torch.float32, device=query.device)
        lse = torch.full((num, heads), float("-inf"), dtype=torch.float32, device=query.device)
        rows = decode_rows(step, num)
        if rows is None:  # no query sees a key: nothing for a kernel to do
            return out, lse
        live, req_to_token, visible = rows
        # fp32 queries (exact: they hold model-dtype values): the kernel then multiplies q.k and p.v in
        # fp32, the arithmetic of vLLM's tl.dot paths and the interface's. With fp16 queries it rounds each
        # product to fp16, ~7e-4 off at unit scale, which the fp16 tolerance (fp32 accumulation) refuses.
        result = self._request(
            "paged_attention", query=encode(query[live].float()), key_cache=encode(key_cache),
            value_cache=encode(value_cache), req_to_token=encode(req_to_token), seq_lens=encode(visible),
            scale=step.scale,
        )  # fmt: skip
        out[live] = decode(result["out"], query.device)
        lse[live] = decode(result["lse"], query.device)
        self.calls[str(self.decode_kernel)] += 1
        return out, lse

    def merge(self, *, outs: Sequence[torch.Tensor], lses: Sequence[torch.Tensor]) -> torch.Tensor:
        """The DCP merge by the release's kernel (or the torch one for a single rank or without it)."""
        if "merge" in self.stand_ins or len(outs) < 2:
            return lse_merge(outs=outs, lses=lses)
        result = self._request(
            "merge", outs=[encode(o.float()) for o in outs], lses=[encode(s.float()) for s in lses]
        )
        self.calls[result["ran"]] += 1
        return decode(result["out"], outs[0].device)


BACKEND_PATH = "unified_attention, over TritonAttentionMetadataBuilder.build's metadata"
"""How the release's Triton backend is driven for ``C = 1``: what an encoder-decoder model runs there."""

DCP_STAND_IN = (
    "stands in (the Triton MLA backend's decode kernel, which returns the LSE): vLLM's DCP needs an "
    "attention backend that returns the LSE, FLASH_ATTN or FLASHINFER for this layout, both CUDA-only"
)
"""Why the decode kernel still runs with DCP, and which backends the engine would use there."""


def engine_positions(step: AttentionStep, num_queries: int) -> bool:
    """Whether the step's queries stand where the engine's backends put them.

    vLLM passes no query positions: a request's ``n`` queries are the last
    ``n`` of its ``seq_lens[b]`` tokens, positions ``seq_lens[b] - n ..
    seq_lens[b] - 1``. The harness's prefill and decode steps keep that;
    cross-attention is not causal, so positions do not matter there.
    """
    if not step.causal:
        return True
    qsl = step.query_start_loc.to(torch.int64).cpu()
    lens = (qsl[1:] - qsl[:-1]).tolist()
    want = [p for s, n in zip(step.seq_lens.tolist(), lens, strict=True) for p in range(int(s) - n, int(s))]
    return len(want) == num_queries and step.query_positions.tolist() == want


DecodeRows = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def decode_rows(step: AttentionStep, num_queries: int) -> DecodeRows | None:
    """Each query as one decode row: ``(live queries, their rows of the table, keys each sees)``.

    A query sees a prefix of its request's local keys: all ``seq_lens[b]`` of
    them without the causal mask, else those whose sequence position is at
    or before its own (a rank's local keys are in position order, so that is
    a prefix too). Its row is the flat table read from its request's row
    start, as the engine reads it (a read past the row lands in the next
    one), as far as the widest query needs. Queries that see no key are left
    out (``None`` when none sees one): the interface gives them 0 and -inf.
    """
    layout = step.layout
    kbs = layout.kernel_block_size
    owners = token_requests(step.query_start_loc.to(torch.int64), num_queries)
    seen = step.seq_lens.to(torch.int64).cpu()[owners.cpu()]
    if step.causal and num_queries:
        local = global_positions(int(seen.max()), layout, "cpu")
        before = torch.searchsorted(local, step.query_positions.to(torch.int64).cpu(), right=True)
        seen = torch.minimum(seen, before)
    live = torch.nonzero(seen > 0).flatten()
    if live.numel() == 0:
        return None
    width = -(-int(seen.max()) // kbs)
    table = step.table.to(torch.int32).cpu()
    starts = owners.cpu()[live] * step.row_stride
    cols = starts[:, None] + torch.arange(width, dtype=torch.int64)[None, :]
    padded = torch.cat([table, torch.zeros(width, dtype=torch.int32)])  # columns no query reads
    req_to_token = padded[cols.clamp(max=padded.numel() - 1)]
    return live, req_to_token.contiguous(), seen[live].to(torch.int32)


def run_block_tables(
    worker: EngineWorker,
    *,
    block_sizes: Sequence[int],
    kernel_block_sizes: Sequence[int],
    max_num_blocks_per_group: Sequence[int],
    max_num_reqs: int,
    max_num_batched_tokens: int,
    appends: Sequence[tuple[int, Sequence[Sequence[int]]]],
    steps: Sequence[dict[str, Any]],
    cp: tuple[int, int, int] = (1, 0, 1),
) -> dict[str, Any]:
    """The release's ``BlockTables``: construct, append, apply staged writes, then gather and map per step.

    Returns the persistent rows, the per-row counts and per step the gathered
    rows and slot mappings, all as the release's code left them. Raises
    :class:`~crossattn_sizing.engine.client.EngineCrash` if the process dies.
    """
    return worker.request(
        "scenario",
        block_sizes=list(block_sizes),
        kernel_block_sizes=list(kernel_block_sizes),
        max_num_blocks_per_group=list(max_num_blocks_per_group),
        max_num_reqs=max_num_reqs,
        max_num_batched_tokens=max_num_batched_tokens,
        appends=[[r, [list(ids) for ids in per_group]] for r, per_group in appends],
        steps=list(steps),
        cp_size=cp[0],
        cp_rank=cp[1],
        cp_interleave=cp[2],
    )


def load_engine_policy(spec: str, deadline: float | None = None) -> VllmPolicy:
    """The ``vllm==X`` (or ``vllm@tree``) sizing policy named by ``spec``: the release's own sizing, each
    call under ``deadline`` seconds (None: ``CROSSATTN_CALL_TIMEOUT``, else the default)."""
    return VllmPolicy(spec, deadline=deadline)


def load_engine_impl(spec: str, device: torch.device, deadline: float | None = None) -> VllmImpl:
    """The ``vllm==X`` implementation named by ``spec``: the release's own kernels on ``device``, each call
    under ``deadline`` seconds (None: ``CROSSATTN_CALL_TIMEOUT``, else the default)."""
    return VllmImpl(spec, device, deadline=deadline)
