"""The worker process that imports one vLLM release and runs its code for the harness.

Started by :mod:`crossattn_sizing.engine.client` as ``python -m
crossattn_sizing.engine.worker [--path DIR]... [--device cpu|cuda]``. Different
releases cannot share an interpreter, and a real kernel that reads past its
allocation through a raw pointer can kill the process, so each release runs
in its own worker and the harness survives it.

Protocol (JSON lines): the worker writes ``{"ready": ..., "shims": [...]}``
once the engine is imported, then answers each request line ``{"op": ...}``
with ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``. It
exits at end of input, so a parent that dies takes its workers with it. The
protocol uses a private copy of stdout: anything the engine prints goes to
stderr. ``widths_many`` answers a list of configs in one round trip, one such
``ok``/``error`` answer per config, so a long ``prove`` pays the pipe once per
batch, not once per config.

On a CPU machine (``--device cpu``) the compatibility layer is what
:data:`CPU_SHIMS` lists, each applied here and reported in the ready line;
nothing else of the engine is replaced.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import inspect
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

CPU_SHIMS = {
    "env:TRITON_INTERPRET=1": "Triton kernels run in Triton's CPU interpreter (set before import)",
    "env:CUDA_VISIBLE_DEVICES=": "no CUDA device: vLLM keeps the real Triton (set before import)",
    "buffer_utils.UvaBuffer": "pinned host buffer with a device view (needs CUDA and _C) -> a plain CPU "
    "tensor that is its own view",
    "torch_utils.PIN_MEMORY=False": "host-to-device copies without pinned memory "
    "(no pinned allocator on CPU)",
    "importlib.metadata.version('vllm')": "a source tree (vllm@PATH) has no installed distribution, and "
    "vLLM reads its own version to decide whether Triton is usable (else it swaps in a placeholder): "
    "answered with the tree's vllm/_version.py, or 0+tree",
    "torch.cuda.get_device_capability=(9, 0)": "the KV-write launcher picks its tile size by GPU "
    "generation; with no GPU it is told a Hopper's (the tile changes how the work is split, not what is "
    "written)",
    "triton InterpretedFunction.constexprs": "0.34's DCP correction launcher counts its kernel's "
    "constexpr parameters, which a compiled kernel lists and the interpreter's stand-in does not: given "
    "the positions of the parameters annotated tl.constexpr, as the compiled kernel has them",
}


class StandIn:
    """A stand-in ``self`` (or config) with exactly the attributes the sizing reads.

    A read of anything else says which attribute the release wanted, so a
    release that reads more fails with the reason instead of a wrong width.
    """

    def __init__(self, name: str, **attrs: Any) -> None:
        self.__dict__["_name"] = name
        self.__dict__.update(attrs)

    def __getattr__(self, attr: str) -> Any:
        raise AttributeError(f"the adapter's stand-in {self._name} has no attribute {attr!r}")


class Inexpressible(ValueError):
    """A harness config this release cannot represent (its answer would be about another config)."""


MAX_CACHED_ROWS = 1 << 16
"""Distinct ``BlockTables`` argument lists (and group specs) a worker keeps (thousands over ``prove``)."""


class Engine:
    """The imported release: spec classes, BlockTables and the sizing source."""

    def __init__(self, device: str) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        self.shims: list[str] = []
        if self.device.type == "cpu":
            self.shims += ["env:TRITON_INTERPRET=1", "env:CUDA_VISIBLE_DEVICES="]
        if _answer_tree_version():
            self.shims.append("importlib.metadata.version('vllm')")
        import vllm

        self.version = getattr(vllm, "__version__", "?")
        self.path = str(Path(vllm.__file__).parent)
        from vllm.v1.worker.gpu import block_table, buffer_utils

        if self.device.type == "cpu":
            self._apply_cpu_shims(buffer_utils)
        self.block_table = block_table
        self.kv = importlib.import_module("vllm.v1.kv_cache_interface")
        from crossattn_sizing.engine.sizing_exec import RUNNER_PATH, load_sizing_source

        runner_file = Path(self.path).parent / RUNNER_PATH
        self.sizing = load_sizing_source(runner_file.read_text(), str(runner_file))
        self._bound: Any = None  # the sizing with its module names resolved, on first use
        self._row_widths: dict[tuple[Any, ...], list[int]] = {}
        self._specs: dict[tuple[Any, ...], Any] = {}
        self._kernels: Any = None  # the release's KV-write/attention/merge kernels, found on first use

    def _apply_cpu_shims(self, buffer_utils: Any) -> None:
        torch = self.torch

        real = buffer_utils.UvaBuffer
        view_is_method = callable(getattr(real, "uva", None))  # 0.34: uva(n) over a _uva tensor

        class CpuUvaBuffer(real):  # type: ignore[misc, valid-type]
            """The release's UvaBuffer with only its constructor replaced: the host tensor is its own view."""

            def __init__(self, size: Any, dtype: Any) -> None:
                self.cpu = torch.zeros(size, dtype=dtype, device="cpu")
                self.np = self.cpu.numpy()
                if view_is_method:
                    self._uva = self.cpu
                else:
                    self.uva = self.cpu

        buffer_utils.UvaBuffer = CpuUvaBuffer
        self.shims.append("buffer_utils.UvaBuffer")
        torch_utils = importlib.import_module("vllm.utils.torch_utils")
        if getattr(torch_utils, "PIN_MEMORY", False):
            torch_utils.PIN_MEMORY = False
            self.shims.append("torch_utils.PIN_MEMORY=False")

    # Objects -----------------------------------------------------------------
    def resolve(self, module: str, attr: str, name: str) -> Any:
        mod = importlib.import_module(module)
        return getattr(mod, attr) if attr else mod

    def spec_for(self, group: dict[str, Any], cfg: Any) -> Any:
        """The engine's own KVCacheSpec for a harness group (fields filled by name)."""
        torch = self.torch
        kind = group["kind"]
        cls_name = {
            "full": "FullAttentionSpec",
            "cross": "CrossAttentionSpec",
            "sliding_window": "SlidingWindowSpec",
            "mamba": "MambaSpec",
        }[kind]
        cls = getattr(self.kv, cls_name)
        names = {f.name for f in dataclasses.fields(cls)}
        replicated = cfg.dcp_size > 1 and kind != "mamba" and not group.get("dcp_sharded", True)
        if replicated and "dcp_sharded" not in names:
            raise Inexpressible(
                f"a {kind} group replicated under DCP: {cls_name} of vLLM {self.version} has no dcp_sharded "
                "field (every attention group is sharded)"
            )
        values: dict[str, Any] = {
            "block_size": group["block_size"],
            "num_kv_heads": 1,
            "head_size": 64,
            "dtype": torch.float16,
            "sliding_window": cfg.max_model_len,
            "shapes": ((1, 1),),
            "dtypes": (torch.float16,),
            "num_speculative_blocks": cfg.num_speculative_blocks,
            "dcp_sharded": bool(group.get("dcp_sharded", True)) and kind != "mamba",
        }
        kwargs = {}
        for f in dataclasses.fields(cls):
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if f.name in values and (required or f.name in ("num_speculative_blocks", "dcp_sharded")):
                kwargs[f.name] = values[f.name]
            elif required:
                raise ValueError(f"{cls_name} needs field {f.name!r}, which the adapter does not fill")
        return cls(**kwargs)

    def shared_spec(self, group: Any, cfg: Any) -> Any:
        """:meth:`spec_for`, made once per distinct input when the spec class is frozen (immutable).

        ``prove`` asks about millions of configs with a handful of group shapes;
        filling the spec's fields by name each time cost a tenth of a config.
        """
        key = (group, cfg.dcp_size, cfg.max_model_len, cfg.num_speculative_blocks)
        spec = self._specs.get(key)
        if spec is None:
            spec = self.spec_for(group.to_dict(), cfg)
            if type(spec).__dataclass_params__.frozen:
                if len(self._specs) >= MAX_CACHED_ROWS:
                    self._specs.clear()
                self._specs[key] = spec
        return spec

    def kv_cache_config(self, cfg: Any) -> Any:
        """A fresh ``KVCacheConfig`` (the release's classes) with one group spec per harness group."""
        kv = self.kv
        specs = [self.shared_spec(g, cfg) for g in cfg.groups]
        groups = [kv.KVCacheGroupSpec([f"layer.{i}"], spec) for i, spec in enumerate(specs)]
        return kv.KVCacheConfig(num_blocks=1024, kv_cache_tensors=[], kv_cache_groups=groups)

    def stand_in_runner(self, cfg: Any) -> StandIn:
        hf = SimpleNamespace()
        if cfg.max_source_positions is not None:
            hf.max_source_positions = cfg.max_source_positions
        model_config = StandIn("model_config", hf_config=hf, max_model_len=cfg.max_model_len)
        scheduler_config = StandIn(
            "scheduler_config",
            max_num_encoder_input_tokens=cfg.encoder_budget,
            max_num_batched_tokens=cfg.max_num_batched_tokens,
            max_num_seqs=cfg.max_num_reqs,
        )
        # 0.34 reads the mamba cache mode: prefix caching keeps position-indexed rows ("align").
        cache_config = StandIn(
            "cache_config",
            enable_prefix_caching=cfg.prefix_caching,
            mamba_cache_mode="align" if cfg.prefix_caching else "none",
        )
        parallel_config = StandIn(
            "parallel_config",
            decode_context_parallel_size=cfg.dcp_size,
            cp_kv_cache_interleave_size=cfg.dcp_interleave,
            prefill_context_parallel_size=1,
        )
        vllm_config = StandIn(
            "vllm_config",
            model_config=model_config,
            scheduler_config=scheduler_config,
            cache_config=cache_config,
            parallel_config=parallel_config,
        )
        return StandIn(
            "GPUModelRunner",
            vllm_config=vllm_config,
            model_config=model_config,
            scheduler_config=scheduler_config,
            cache_config=cache_config,
            parallel_config=parallel_config,
            max_model_len=cfg.max_model_len,
            max_num_reqs=cfg.max_num_reqs,
            max_num_tokens=cfg.max_num_batched_tokens,
            is_encoder_decoder=cfg.is_encoder_decoder,
            dcp_size=cfg.dcp_size,
            dcp_rank=0,
            cp_interleave=cfg.dcp_interleave,
            device=self.device,
        )

    def block_tables(self, **kw: Any) -> Any:
        """``BlockTables`` with the keyword arguments this release's constructor takes."""
        accepted = {k: v for k, v in kw.items() if k in self.table_params}
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
        """The release's own kernels (:mod:`crossattn_sizing.engine.kernels`), found on first use.

        Not at start-up: a worker that only sizes never imports the attention ops (nor their imports).
        """
        if self._kernels is None:
            from crossattn_sizing.engine.kernels import ReleaseKernels

            if self.device.type == "cpu":
                self.torch.cuda.get_device_capability = lambda device=None: (9, 0)
                self.shims.append("torch.cuda.get_device_capability=(9, 0)")
                if _interpreter_constexprs():
                    self.shims.append("triton InterpretedFunction.constexprs")
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

    def op_merge(self, req: dict[str, Any]) -> dict[str, Any]:
        """The release's merge of the rank partials sent: ``out``, ``lse`` and ``ran`` (what ran)."""
        from crossattn_sizing.engine.tensors import decode, encode

        out, lse, ran = self.kernels.merge([decode(t) for t in req["outs"]], [decode(t) for t in req["lses"]])
        return {"out": encode(out), "lse": encode(lse), "ran": ran}

    def widths(self, cfg: Any) -> dict[str, Any]:
        """``{"blocks", "widths", "length"}``: the release's sizing of ``cfg``, in its own tables' entries."""
        from crossattn_sizing.engine.sizing_exec import bind

        if "kernel_block_sizes" not in self.table_params and any(g.kbs != g.block_size for g in cfg.groups):
            raise Inexpressible(
                f"kernel block smaller than the block: vLLM {self.version}'s BlockTables takes no kernel "
                "block sizes (its rows hold ids of blocks of the spec's own size)"
            )
        if self._bound is None:
            self._bound = bind(self.sizing, self.resolve)
        out = self._bound(self.stand_in_runner(cfg), self.kv_cache_config(cfg))
        blocks = [int(b) for b in out["max_num_blocks_per_group"]]
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
        from crossattn_sizing.config import RunnerConfig

        return self.widths(RunnerConfig.from_dict(req["config"]))

    def op_widths_many(self, req: dict[str, Any]) -> dict[str, Any]:
        """``widths`` of every config listed: one answer per config, in order, each ok or its error.

        A config that raises is that config's answer and the rest still run. A
        module the release imports on first use fails the whole request
        instead, so the client installs it and asks again, as for ``widths``.
        """
        from crossattn_sizing.config import RunnerConfig

        results = []
        for data in req["configs"]:
            answer = _answer(lambda data=data: self.widths(RunnerConfig.from_dict(data)))
            if answer.get("missing_module"):
                raise ModuleNotFoundError(answer["error"], name=answer["missing_module"])
            results.append(answer)
        return {"results": results}

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
            qsl = torch.tensor([0, *_cumsum(lens)], dtype=torch.int32, device=self.device)
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


def _interpreter_constexprs() -> bool:
    """Give Triton's ``InterpretedFunction`` the ``constexprs`` list a compiled kernel has (if it lacks one).

    The positions of the parameters annotated ``tl.constexpr``, as Triton's
    ``JITFunction`` computes them. Only 0.34's DCP launcher reads it (to count
    them); without it that launcher stops with an ``AttributeError`` on CPU.
    """
    from triton.runtime.interpreter import InterpretedFunction

    if hasattr(InterpretedFunction, "constexprs"):
        return False

    def constexprs(self: Any) -> list[int]:
        params = inspect.signature(self.fn).parameters.values()
        return [i for i, p in enumerate(params) if "constexpr" in str(p.annotation)]

    InterpretedFunction.constexprs = property(constexprs)  # type: ignore[attr-defined]
    return True


def _answer_tree_version() -> bool:
    """Give a ``vllm`` without distribution metadata (a checkout) a version for ``importlib.metadata``.

    vLLM's ``triton_utils`` calls ``importlib.metadata.version("vllm")`` while
    deciding whether Triton is usable; for a tree that was never installed the
    lookup fails and vLLM silently replaces Triton with a placeholder. Only the
    name ``vllm`` is answered, and only when no metadata exists. True if applied.
    """
    import importlib.metadata as metadata
    import importlib.util
    import re

    try:
        metadata.version("vllm")
        return False
    except metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return False
    version_file = Path(next(iter(spec.submodule_search_locations))) / "_version.py"
    found = re.search(r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""",
                      version_file.read_text()) if version_file.is_file() else None  # fmt: skip
    tree_version = found.group(1) if found else "0+tree"
    real = metadata.version

    def version(name: str) -> str:
        if name == "vllm":
            return tree_version
        return real(name)

    metadata.version = version  # type: ignore[assignment]
    return True


def added_modules(paths: list[str]) -> list[str]:
    """Top-level modules the import chain took from the adapter's dependency directories."""
    roots = [str(Path(p).resolve()) for p in paths]
    found = set()
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if file and any(str(Path(file).resolve()).startswith(r + os.sep) for r in roots):
            found.add(name.split(".")[0])
    return sorted(found)


def failure(exc: BaseException) -> dict[str, Any]:
    """An error as the protocol sends it: its text, its kind and, for a missing module, that module.

    ``missing_module`` is the dotted name Python's import system gives the
    error (``ModuleNotFoundError.name``), so the client installs what is
    missing without reading it out of the message.
    """
    out: dict[str, Any] = {"error": f"{type(exc).__name__}: {exc}", "kind": type(exc).__name__}
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        out["missing_module"] = exc.name
    return out


def _answer(call: Callable[[], Any]) -> dict[str, Any]:
    """``{"ok": true, "result": ...}``, or what ``call`` raised (:func:`failure`): the protocol's answer."""
    try:
        return {"ok": True, "result": call()}
    except Exception as exc:  # one request's failure is its answer; the worker stays up
        return {"ok": False, **failure(exc)}


def _cumsum(values: list[int]) -> list[int]:
    out, total = [], 0
    for v in values:
        total += v
        out.append(total)
    return out


def _dispatch(engine: Engine, req: dict[str, Any]) -> Any:
    return getattr(engine, f"op_{req['op']}")(req)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="crossattn_sizing.engine.worker")
    parser.add_argument("--path", action="append", default=[], help="directory put first on sys.path")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    # The protocol gets its own copy of stdout; what the engine prints goes to stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    sys.path[:0] = args.path
    start = time.perf_counter()
    try:
        engine = Engine(args.device)
    except BaseException as exc:  # reported to the parent as one line, then exit
        proto.write(json.dumps({"ready": False, **failure(exc)}) + "\n")
        return 1
    ready = {
        "ready": True,
        "added_modules": added_modules(args.path[1:]),
        "version": engine.version,
        "path": engine.path,
        "shims": engine.shims,
        "import_s": round(time.perf_counter() - start, 2),
    }
    proto.write(json.dumps(ready) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = _answer(lambda line=line: _dispatch(engine, json.loads(line)))
        proto.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
