"""vLLM's own code as a sizing policy and as an implementation: ``vllm==X`` (or ``vllm``, the installed one).

- :class:`VllmPolicy`: the widths ``GPUModelRunner.initialize_kv_cache`` of the
  release computes for a config (its sizing loop, executed), in the entries
  its ``BlockTables`` allocate per row.
- :class:`VllmImpl`: the release's Triton slot-mapping kernel
  (``BlockTables.compute_slot_mappings``) over the harness's tables; KV write,
  paged attention and the DCP merge are the harness's torch ones (vLLM's
  attention backends are CUDA kernels with no CPU path), which its name says.
- :func:`run_block_tables`: the release's ``BlockTables`` end to end (append,
  staged writes, gather, slot mapping), for the engine coverage check.

All of it runs in the release's worker process (:mod:`crossattn_sizing.engine.client`).
"""

from __future__ import annotations

import json
import queue
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from crossattn_sizing import interrupts
from crossattn_sizing.attention import lse_merge, torch_paged_attention, torch_write_kv
from crossattn_sizing.config import RunnerConfig
from crossattn_sizing.engine.client import EngineCrash, Inexpressible, Worker, parallel_workers, worker_for
from crossattn_sizing.engine.install import EngineError
from crossattn_sizing.prove import Answer
from crossattn_sizing.step import SlotStep

FIRST_FIXED = (0, 25, 0)
"""The first release whose V2 sizing includes the encoder budget (PR #46753)."""

BATCH = 1024
"""Configs per ``widths_many`` request: about 250 kB of JSON, under a tenth of a second in a worker
(small enough that the last batch of a tile leaves the other workers idle only briefly)."""


def is_engine_spec(spec: str) -> bool:
    """Whether a ``--sizing-policy``/``--impl`` value names vLLM's own code."""
    return spec.strip() == "vllm" or spec.strip().startswith("vllm==")


def normalise(spec_or_version: str) -> str:
    """``0.24.0``, ``vllm==0.24.0`` -> ``vllm==0.24.0``; ``vllm`` stays."""
    s = spec_or_version.strip()
    return s if is_engine_spec(s) else f"vllm=={s}"


def _version_key(version: str | None) -> tuple[int, ...] | None:
    if version is None:
        return None
    try:
        return tuple(int(p) for p in version.split(".")[:3])
    except ValueError:
        return None


class VllmPolicy:
    """The sizing of a vLLM release, executed. Widths are cached per config (they are pure)."""

    def __init__(self, spec: str, device: str = "cpu", worker: Worker | None = None) -> None:
        self.spec = normalise(spec)
        self.device = device
        self.worker = worker if worker is not None else worker_for(self.spec, device)
        self.worker.start()
        self.version: str | None = self.worker.ready.get("version")
        self._cache: dict[str, dict[str, Any]] = {}
        self._siblings: list[Worker] = []

    def __repr__(self) -> str:  # short: Hypothesis prints it in every falsifying example
        return f"VllmPolicy({self.spec!r})"

    @property
    def name(self) -> str:
        return self.spec if self.spec != "vllm" else f"vllm (installed {self.version})"

    @property
    def expected_to_hold(self) -> bool:
        """Releases before 0.25.0 carry the pre-fix sizing: their failure is the expected verdict."""
        key = _version_key(self.version)
        return key is None or key >= FIRST_FIXED

    @property
    def summary(self) -> str:
        return f"vLLM {self.version} GPUModelRunner.initialize_kv_cache, executed"

    def sizing(self, config: RunnerConfig) -> dict[str, Any]:
        """``{"blocks", "widths", "length"}`` as the release's code computed them."""
        key = json.dumps(config.to_dict(), sort_keys=True)
        if key not in self._cache:
            try:
                self._cache[key] = self.worker.request("widths", config=config.to_dict())
            except Inexpressible as exc:
                not_applicable(f"{self.spec}: {exc}")
                raise
        return self._cache[key]

    def __call__(self, config: RunnerConfig) -> tuple[int, ...]:
        return _widths(self.sizing(config))

    def widths_many(self, configs: Sequence[RunnerConfig]) -> list[Answer]:
        """``self(c)`` for each config, :data:`BATCH` configs per round trip to a worker (for ``prove``).

        One item per config, in order: its widths, or the error asking about
        it raised (:class:`Inexpressible` or another refusal of the release).
        Batches are spread over :func:`parallel_workers` processes of the
        release (this policy's own, then siblings started on first need). A
        batch that kills its worker is asked again one config at a time, each
        crash starting a fresh worker, so the :class:`EngineCrash` is the item
        of the config that caused it; the list ends there (later configs have
        no answer). Nothing is cached: prove asks about each config once.
        """
        batches = [configs[i : i + BATCH] for i in range(0, len(configs), BATCH)]
        workers = self._workers(len(batches))
        if len(workers) == 1:
            return _until_crash(_ask(workers[0], b) for b in batches)
        free: queue.SimpleQueue[Worker] = queue.SimpleQueue()
        for worker in workers:
            free.put(worker)

        def run(batch: Sequence[RunnerConfig]) -> list[Answer]:
            worker = free.get()
            try:
                return _ask(worker, batch)
            finally:
                free.put(worker)

        pool = ThreadPoolExecutor(len(workers), thread_name_prefix="engine-batch")
        try:
            return _until_crash(pool.map(run, batches))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    @property
    def workers(self) -> list[Worker]:
        """This policy's worker processes: its own, then the siblings parallel batches started."""
        return [self.worker, *self._siblings]

    def end_batches(self) -> None:
        """End the extra processes started for parallel batches (the shared worker stays up).

        ``prove_all`` calls it when done, so a verify over many releases keeps one process per release.
        """
        while self._siblings:
            self._siblings.pop().close()

    def _workers(self, batches: int) -> list[Worker]:
        """This policy's worker, and as many siblings as ``batches`` can keep busy (up to the limit)."""
        want = min(batches, parallel_workers())
        while len(self._siblings) < want - 1:
            self._siblings.append(self.worker.sibling())
        return [self.worker, *self._siblings[: want - 1]]


def _until_crash(answered: Iterable[list[Answer]]) -> list[Answer]:
    """The batches' answers joined, up to and including the first :class:`EngineCrash`."""
    out: list[Answer] = []
    for answers in answered:
        out += answers
        if answers and isinstance(answers[-1], EngineCrash):
            break
    return out


def _ask(worker: Worker, batch: Sequence[RunnerConfig]) -> list[Answer]:
    """One ``widths_many`` request; after a crash, one ``widths`` request per config until one dies."""
    try:
        answers = worker.request("widths_many", configs=[c.to_dict() for c in batch])["results"]
    except EngineCrash:
        out: list[Answer] = []
        for config in batch:
            if interrupts.requested():  # Ctrl-C also ends the workers: asking again would restart them
                raise KeyboardInterrupt from None
            try:
                out.append(_widths(worker.request("widths", config=config.to_dict())))
            except EngineCrash as exc:
                out.append(exc)
                break
            except EngineError as exc:
                out.append(exc)
        return out
    return [_widths(a["result"]) if a["ok"] else worker.refusal("widths", a) for a in answers]


def _widths(sizing: dict[str, Any]) -> tuple[int, ...]:
    return tuple(int(w) for w in sizing["widths"])


def not_applicable(why: str) -> None:
    """Inside a Hypothesis example: discard it (the release cannot be asked about it), counted as an event.

    Outside one (``check``, ``reproduce``) the caller re-raises the error: a
    config the release cannot represent has no verdict.
    """
    from hypothesis import event, reject
    from hypothesis.control import currently_in_test_context

    if currently_in_test_context():
        event(f"not expressible in the engine, example discarded: {why.split(':', 1)[-1].strip()[:80]}")
        reject()


def executed_widths(version: str, config: RunnerConfig) -> tuple[int, ...]:
    """Row widths (entries) that release ``version``'s own sizing code gives ``config``.

    Raises :class:`~crossattn_sizing.engine.install.EngineError` with the reason
    when the release cannot be obtained, imported or run on this machine.
    """
    return VllmPolicy(version)(config)


class VllmImpl:
    """vLLM's Triton slot-mapping kernel, composed with the harness's torch KV write, attention and merge."""

    write_kv = staticmethod(torch_write_kv)
    paged_attention = staticmethod(torch_paged_attention)
    merge = staticmethod(lse_merge)

    def __init__(self, spec: str, device: torch.device | str = "cpu", worker: Worker | None = None) -> None:
        self.device = torch.device(device)
        self.spec = normalise(spec)
        self.worker = worker if worker is not None else worker_for(self.spec, self.device.type)
        self.name = f"{self.spec} (slot mapping: vLLM kernel; write/attention/merge: torch)"

    def __repr__(self) -> str:  # short: Hypothesis prints it in every falsifying example
        return f"VllmImpl({self.spec!r}, device={str(self.device)!r})"

    def slot_mapping(self, *, step: SlotStep, out: torch.Tensor) -> None:
        if step.row_stride < 1:
            raise EngineError(
                f"{self.spec}: a block table of width {step.row_stride} has no rows to map through"
            )
        layout = step.layout
        result = self.worker.request(
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


def run_block_tables(
    worker: Worker,
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


def load_engine_policy(spec: str) -> VllmPolicy:
    return VllmPolicy(spec)


def load_engine_impl(spec: str, device: torch.device) -> VllmImpl:
    return VllmImpl(spec, device)
