"""One vLLM release, imported inside its worker: its objects, caches, and the operations asked of it.

Why apart from the loop: the loop (:mod:`crossattn_sizing.engine.worker`)
only reads requests and writes answers; what each ``op`` does with the
release is here, built from the release's own classes through
:mod:`crossattn_sizing.engine.vllm.quirks` (where releases differ), with the CPU
shims of :mod:`crossattn_sizing.engine.vllm.shims` applied on a machine with no GPU.
The release is imported from ``sys.path`` when an :class:`Engine` is made,
never at import of this module.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import itertools
from pathlib import Path
from typing import Any

from crossattn_sizing.engine import protocol
from crossattn_sizing.engine.vllm import quirks
from crossattn_sizing.engine.vllm.shims import cpu_buffers, cpu_kernels

FRESH_COPY = "sizing: deepcopy of the harness's fresh KVCacheConfig builds it again"
"""The shim :meth:`Engine.copy_of_fresh` is reported by (on any device): see its docstring."""

MAX_CACHED_ROWS = 1 << 16
"""Distinct ``BlockTables`` argument lists (and group specs) a worker keeps (thousands over ``prove``)."""


class Engine:
    """The imported release: spec classes, BlockTables and the sizing source."""

    def __init__(self, device: str, shims: list[str] | None = None) -> None:
        """Import the release from ``sys.path``; ``shims``: those already applied (the environment)."""
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.shims: list[str] = list(shims or [])
        if quirks.answer_tree_version():
            self.shims.append("importlib.metadata.version('vllm')")
        import vllm

        self.version = getattr(vllm, "__version__", "?")
        self.path = str(Path(vllm.__file__).parent)
        from vllm.v1.worker.gpu import block_table, buffer_utils

        if self.device.type == "cpu":
            self.shims += cpu_buffers(torch, buffer_utils)
        self.block_table = block_table
        self.kv = importlib.import_module("vllm.v1.kv_cache_interface")
        self.sizing = self.sizing_source("v2")
        self._sources: dict[str, Any] = {"v2": self.sizing}
        self._bound: dict[str, Any] = {}  # per runner: the sizing, its module names resolved on first use
        self._row_widths: dict[tuple[Any, ...], list[int]] = {}
        self._specs: dict[tuple[Any, ...], Any] = {}
        self._kernels: Any = None  # the release's KV-write/attention/merge kernels, found on first use
        self._fresh: tuple[Any, Any] | None = None  # the config handed to the sizing now, and how to build it
        self._startup: Any = None  # the start-up methods (startup.StartupRun), read on first use

    def sizing_source(self, runner: str) -> Any:
        """The compiled sizing of ``runner`` (a key of :data:`.sizing_exec.EXECUTED_RUNNERS`) in this release.

        A release without that runner's file is a refusal naming the file (the
        audit then says the runner is absent from the release).
        """
        from crossattn_sizing.engine.vllm.sizing_exec import (
            EXECUTED_RUNNERS,
            SizingExecError,
            load_sizing_source,
        )

        path, class_name = EXECUTED_RUNNERS[runner]
        runner_file = Path(self.path).parent / path
        if not runner_file.is_file():
            raise SizingExecError(f"{path}: not in vLLM {self.version} (no {class_name} to run)")
        return load_sizing_source(runner_file.read_text(), str(runner_file), class_name)

    # Objects -----------------------------------------------------------------
    def resolve(self, module: str, attr: str, name: str) -> Any:
        """The release's object ``module.attr`` (the module itself without ``attr``)."""
        mod = importlib.import_module(module)
        return getattr(mod, attr) if attr else mod

    def resolve_for_sizing(self, module: str, attr: str, name: str) -> Any:
        """:meth:`resolve`, but ``copy.deepcopy`` is :meth:`copy_of_fresh` (the shim "sizing: ...")."""
        if (module, attr) == ("copy", "deepcopy"):
            if FRESH_COPY not in self.shims:
                self.shims.append(FRESH_COPY)
            return self.copy_of_fresh
        return self.resolve(module, attr, name)

    def copy_of_fresh(self, x: Any, memo: Any = None) -> Any:
        """``deepcopy`` as the release's sizing sees it: the harness's own config is built again.

        ``initialize_kv_cache`` starts with ``deepcopy(kv_cache_config)``. The
        config it is handed is one the harness built for this call alone, so
        building it again from the same arguments gives what a deep copy
        would: a distinct ``KVCacheConfig`` of equal value (its group specs
        distinct too, unless their class is frozen, when they are shared as
        the harness shares them between calls). The deep copy was half a
        config's cost in ``prove`` (2.4 million configs). Anything else asked
        of ``deepcopy`` gets the real one.
        """
        fresh = self._fresh
        if fresh is not None and x is fresh[0]:
            self._fresh = None  # one copy per call, as the release makes
            return fresh[1]()
        return copy.deepcopy(x, memo)

    def shared_spec(self, group: Any, cfg: Any) -> Any:
        """:func:`.quirks.spec_for`, made once per distinct input when the spec class is frozen (immutable).

        ``prove`` asks about millions of configs with a handful of group shapes;
        filling the spec's fields by name each time cost a tenth of a config.
        """
        key = (group, cfg.dcp_size, cfg.max_model_len, cfg.num_speculative_blocks)
        spec = self._specs.get(key)
        if spec is None:
            spec = quirks.spec_for(self.kv, self.version, group.to_dict(), cfg)
            if type(spec).__dataclass_params__.frozen:
                if len(self._specs) >= MAX_CACHED_ROWS:
                    self._specs.clear()
                self._specs[key] = spec
        return spec

    def block_tables(self, **kw: Any) -> Any:
        """``BlockTables`` with the keyword arguments this release's constructor takes."""
        accepted = quirks.table_arguments(self.table_params, kw)
        return self.block_table.BlockTables(device=self.device, **accepted)

    @functools.cached_property
    def table_params(self) -> Any:
        """The parameters this release's ``BlockTables`` constructor takes."""
        return inspect.signature(self.block_table.BlockTables).parameters

    def row_widths(self, **kw: Any) -> list[int]:
        """Each group's row length in the ``BlockTables`` these arguments build (entries per row).

        Cached by the arguments: a table's shape is a function of them, and
        building the tables (a dozen tensors) cost more than the sizing itself.
        """
        key = tuple(tuple(v) if isinstance(v, list) else v for v in kw.values())
        widths = self._row_widths.get(key)
        if widths is None:
            if len(self._row_widths) >= MAX_CACHED_ROWS:
                self._row_widths.clear()
            tables = self.block_tables(**kw)
            widths = self._row_widths[key] = [int(t.gpu.shape[1]) for t in tables.block_tables]
        return widths

    @property
    def kernels(self) -> Any:
        """The release's own kernels (:mod:`crossattn_sizing.engine.vllm.kernels`), found on first use.

        Not at start-up: a worker that only sizes never imports the attention ops (nor their imports).
        """
        if self._kernels is None:
            from crossattn_sizing.engine.vllm.kernels import ReleaseKernels

            if self.device.type == "cpu":
                self.shims += cpu_kernels(self.torch)
            self._kernels = ReleaseKernels(self.torch)
        return self._kernels

    # Operations --------------------------------------------------------------
    def op_kernels(self, req: dict[str, Any]) -> dict[str, Any]:
        """Which function runs each step (dotted name, or None where this release has none), and the shims."""
        kernels = self.kernels
        return {"provenance": kernels.provenance, "tried": kernels.tried, "shims": self.shims}

    def op_write_kv(self, req: dict[str, Any]) -> dict[str, Any]:
        """The release's KV write into the caches sent; the caches as it left them."""
        from crossattn_sizing.engine.tensors import decode, encode

        key_cache, value_cache = decode(req["key_cache"]), decode(req["value_cache"])
        self.kernels.write_kv(decode(req["key"]), decode(req["value"]), key_cache, value_cache,
                              decode(req["slots"]))  # fmt: skip
        return {"key_cache": encode(key_cache), "value_cache": encode(value_cache)}

    def op_paged_attention(self, req: dict[str, Any]) -> dict[str, Any]:
        """The release's paged attention over the rows and lengths sent: fp32 ``out`` and ``lse``."""
        from crossattn_sizing.engine.tensors import decode, encode

        out, lse = self.kernels.paged_attention(
            decode(req["query"]), decode(req["key_cache"]), decode(req["value_cache"]),
            decode(req["req_to_token"]), decode(req["seq_lens"]), float(req["scale"]),
        )  # fmt: skip
        return {"out": encode(out), "lse": encode(lse)}

    def op_backend_attention(self, req: dict[str, Any]) -> dict[str, Any]:
        """The release's Triton backend (builder metadata, ``TritonAttentionImpl.forward``): fp32 ``out``."""
        from crossattn_sizing.engine.tensors import decode, encode

        out = self.kernels.backend_attention(
            decode(req["query"]), decode(req["key_cache"]), decode(req["value_cache"]), decode(req["table"]),
            int(req["row_stride"]), decode(req["query_start_loc"]), decode(req["seq_lens"]),
            bool(req["causal"]), float(req["scale"]),
        )  # fmt: skip
        return {"out": encode(out)}

    def op_merge(self, req: dict[str, Any]) -> dict[str, Any]:
        """The release's merge of the rank partials sent: ``out``, ``lse`` and ``ran`` (what ran)."""
        from crossattn_sizing.engine.tensors import decode, encode

        out, lse, ran = self.kernels.merge([decode(t) for t in req["outs"]], [decode(t) for t in req["lses"]])
        return {"out": encode(out), "lse": encode(lse), "ran": ran}

    def widths(self, cfg: Any, runner: str = "v2") -> dict[str, Any]:
        """``{"blocks", "widths", "length"}``: the release's sizing of ``cfg``, in its own tables' entries.

        ``runner``: whose copy of the sizing runs (V2's ``GPUModelRunner`` by
        default; ``"cpu"``: 0.34's ``StandaloneCPUModelRunner``). V2's width is
        measured in the ``BlockTables`` its blocks build; the CPU runner's
        ``CPUBlockTables`` (``vllm/v1/worker/cpu/block_table.py``) allocates each
        group's rows exactly ``max_num_blocks_per_group[g]`` wide, so its
        widths are the executed blocks (building it would import the compiled
        ``_cpu_ops``, which a CPU wheel of the GPU build does not have).
        """
        from crossattn_sizing.engine.vllm.sizing_exec import bind

        quirks.check_kernel_blocks(self.table_params, self.version, cfg)
        bound = self._bound.get(runner)
        if bound is None:
            if runner not in self._sources:
                self._sources[runner] = self.sizing_source(runner)
            bound = self._bound[runner] = bind(self._sources[runner], self.resolve_for_sizing)

        def build() -> Any:
            return quirks.kv_cache_config(self.kv, [self.shared_spec(g, cfg) for g in cfg.groups])

        config = build()
        self._fresh = (config, build)
        try:
            out = bound(quirks.stand_in_runner(cfg, self.device), config)
        finally:
            self._fresh = None
        blocks = [int(b) for b in out["max_num_blocks_per_group"]]
        if runner == "cpu":
            return {"blocks": blocks, "widths": blocks, "length": int(out["block_table_max_model_len"])}
        widths = self.row_widths(
            block_sizes=[g.block_size for g in cfg.groups],
            max_num_reqs=1,
            max_num_batched_tokens=1,
            max_num_blocks_per_group=blocks,
            kernel_block_sizes=[g.kbs for g in cfg.groups],
            dcp_sharded=[g.dcp_sharded for g in cfg.groups],
        )
        return {"blocks": blocks, "widths": widths, "length": int(out["block_table_max_model_len"])}

    def op_widths(self, req: dict[str, Any]) -> dict[str, Any]:
        """Answer a ``widths`` request: the release's sizing of one config."""
        from crossattn_sizing.core.config import RunnerConfig

        return self.widths(RunnerConfig.from_dict(req["config"]), req.get("runner", "v2"))

    def op_widths_many(self, req: dict[str, Any]) -> dict[str, Any]:
        """``widths`` of every config listed (``configs``) or of a prove tile (``tile``), in order.

        A config that raises is that config's answer and the rest still run. A
        module the release imports on first use fails the whole request
        instead, so the client installs it and asks again, as for ``widths``.
        A tile (:class:`~crossattn_sizing.core.config_tile.ConfigTile`: its
        bases and packed lengths) is answered packed too: each config's widths
        in one int64 array, a failure in ``rest`` (packed as a user policy's
        worker packs, :func:`~crossattn_sizing.engine.subject.bind_packing`), so
        neither side encodes or parses a config, or its answer, config by config.
        """
        from crossattn_sizing.core.config import RunnerConfig
        from crossattn_sizing.core.config_tile import ConfigTile
        from crossattn_sizing.engine.subject import bind_packing

        runner = req.get("runner", "v2")
        if "tile" in req:
            answers = self.widths_each(ConfigTile.from_dict(req["tile"]), runner)
            return bind_packing()([tuple(a["result"]["widths"]) if a["ok"] else a for a in answers])
        return {"results": self.widths_each((RunnerConfig.from_dict(d) for d in req["configs"]), runner)}

    def widths_each(self, configs: Any, runner: str) -> list[dict[str, Any]]:
        """The protocol answer (:func:`protocol.answer`) of ``widths`` for each config, in order."""
        results = []
        for cfg in configs:
            answer = protocol.answer(lambda cfg=cfg: self.widths(cfg, runner))  # type: ignore[misc]
            if answer.get("missing_module"):
                raise ModuleNotFoundError(answer["error"], name=answer["missing_module"])
            results.append(answer)
        return results

    def op_startup(self, req: dict[str, Any]) -> dict[str, Any]:
        """The release's start-up batches for ``config`` and ``capture_sizes``, judged against its own rows.

        A start-up method the adapter cannot find, or a piece it reaches that has no stand-in, answers
        ``{"not_run": why}``: the harness's gap, never a verdict on the release.
        """
        from crossattn_sizing.core.config import RunnerConfig
        from crossattn_sizing.engine.adapter import StandInReached
        from crossattn_sizing.engine.vllm import startup

        cfg = RunnerConfig.from_dict(req["config"])
        try:
            if self._startup is None:
                self._startup = startup.read_tree(Path(self.path).parent, self.version)
            widths = self.widths(cfg)["widths"]
            verdict = startup.judge(self._startup, cfg, tuple(req["capture_sizes"]), widths)
        except (startup.StartupSourceError, StandInReached) as exc:
            return {"not_run": str(exc)}
        return startup.verdict_dict(verdict)

    def op_scenario(self, req: dict[str, Any]) -> dict[str, Any]:
        """Append, apply the staged writes, then per step gather and compute slot mappings."""
        torch = self.torch
        num_groups = len(req["block_sizes"])
        bt = self.block_tables(
            block_sizes=req["block_sizes"],
            max_num_reqs=req["max_num_reqs"],
            max_num_batched_tokens=req["max_num_batched_tokens"],
            max_num_blocks_per_group=req["max_num_blocks_per_group"],
            kernel_block_sizes=req.get("kernel_block_sizes", req["block_sizes"]),
            cp_size=req.get("cp_size", 1),
            cp_rank=req.get("cp_rank", 0),
            cp_interleave=req.get("cp_interleave", 1),
        )
        try:
            for req_index, ids in req["appends"]:
                bt.append_block_ids(req_index, tuple(ids), False)
        except RuntimeError as exc:  # 0.34+ refuses a row overflow on the host
            return {"refused": str(exc)}
        bt.apply_staged_writes()
        steps = []
        for step in req["steps"]:
            idx = torch.tensor(step["idx_mapping"], dtype=torch.int32, device=self.device)
            lens = [len(p) for p in step["positions"]]
            qsl = torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device=self.device)
            flat = [p for ps in step["positions"] for p in ps]
            pos = torch.tensor(flat, dtype=torch.int64, device=self.device)
            gathered = bt.gather_block_tables(idx, step.get("num_reqs_padded", len(lens)))
            slots = bt.compute_slot_mappings(idx, qsl, pos, len(flat))
            steps.append(
                {
                    "slots": [slots[g, : len(flat)].tolist() for g in range(num_groups)],
                    "gathered": [gathered[g].tolist() for g in range(num_groups)],
                }
            )
        return {
            "rows": [t.gpu.tolist() for t in bt.block_tables],
            "num_blocks": bt.num_blocks.np.tolist(),
            "steps": steps,
        }

    def op_slots(self, req: dict[str, Any]) -> dict[str, Any]:
        """The release's slot-mapping kernel over a table the harness filled (the Impl path)."""
        torch = self.torch
        storage, stride = req["storage"], req["row_stride"]
        rows = max(1, -(-len(storage) // stride))
        bt = self.block_tables(
            block_sizes=[req["kbs"]],
            max_num_reqs=rows,
            max_num_batched_tokens=max(req["out_len"], 1),
            max_num_blocks_per_group=[stride],
            kernel_block_sizes=[req["kbs"]],
            cp_size=req["dcp_size"],
            cp_rank=req["rank"],
            cp_interleave=req["interleave"],
        )
        flat = bt.block_tables[0].gpu.view(-1)
        flat[: len(storage)] = torch.tensor(storage, dtype=torch.int32, device=self.device)
        idx = torch.tensor(req["req_rows"], dtype=torch.int32, device=self.device)
        qsl = torch.tensor(req["qsl"], dtype=torch.int32, device=self.device)
        pos = torch.tensor(req["positions"], dtype=torch.int64, device=self.device)
        slots = bt.compute_slot_mappings(idx, qsl, pos, req["out_len"])
        return {"slots": slots[0, : req["out_len"]].tolist()}
