"""What differs between vLLM releases, met in one place: how the worker builds what each release reads.

Why apart from the worker's loop: releases rename and add fields, take
different constructor arguments and read different attributes of the runner;
each such difference is handled here, by inspecting the release (its
dataclass fields, its constructor's signature) rather than by version
numbers, and a harness config a release cannot represent is refused with
:class:`Unrepresentable` instead of answered about another config. A new
release's difference goes here, with a test in ``tests/test_engine_fixture.py``
on the recorded sources. Nothing here imports the release: the caller passes
its modules in (the release is importable only inside the worker).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata as metadata
import importlib.util
import re
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any


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


class Unrepresentable(ValueError):
    """A harness config this release cannot represent (its answer would be about another config).

    Raised in the worker process; the client reads the class name from the answer's ``kind`` and
    raises its :class:`~crossattn_sizing.engine.client.Inexpressible` (keep the two names apart).
    """


SPEC_CLASSES = {
    "full": "FullAttentionSpec",
    "cross": "CrossAttentionSpec",
    "sliding_window": "SlidingWindowSpec",
    "mamba": "MambaSpec",
}
"""The release's ``KVCacheSpec`` class for each harness group kind."""


def spec_for(kv: Any, version: str, group: dict[str, Any], cfg: Any) -> Any:
    """The engine's own KVCacheSpec for a harness group (fields filled by name).

    ``kv`` is the release's ``vllm.v1.kv_cache_interface``. A field the
    release's class lacks is left out where it has a default meaning (older
    releases have no ``dcp_sharded``); one it requires that the adapter does
    not fill is an error naming it.
    """
    import torch

    kind = group["kind"]
    cls_name = SPEC_CLASSES[kind]
    cls = getattr(kv, cls_name)
    names = {f.name for f in dataclasses.fields(cls)}
    replicated = cfg.dcp_size > 1 and kind != "mamba" and not group.get("dcp_sharded", True)
    if replicated and "dcp_sharded" not in names:
        raise Unrepresentable(
            f"a {kind} group replicated under DCP: {cls_name} of vLLM {version} has no dcp_sharded "
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


def kv_cache_config(kv: Any, specs: list[Any]) -> Any:
    """A fresh ``KVCacheConfig`` (the release's classes) with one group per spec, in order."""
    groups = [kv.KVCacheGroupSpec([f"layer.{i}"], spec) for i, spec in enumerate(specs)]
    return kv.KVCacheConfig(num_blocks=1024, kv_cache_tensors=[], kv_cache_groups=groups)


def stand_in_runner(cfg: Any, device: Any) -> StandIn:
    """The ``GPUModelRunner`` the sizing reads, with every attribute any release reads of it."""
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
        device=device,
    )


def table_arguments(params: Mapping[str, Any], kw: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments this release's ``BlockTables`` constructor takes (``params``), of ``kw``."""
    return {k: v for k, v in kw.items() if k in params}


def check_kernel_blocks(params: Mapping[str, Any], version: str, cfg: Any) -> None:
    """Refuse a kernel block smaller than the block where the release's ``BlockTables`` cannot take one."""
    if "kernel_block_sizes" not in params and any(g.kbs != g.block_size for g in cfg.groups):
        raise Unrepresentable(
            f"kernel block smaller than the block: vLLM {version}'s BlockTables takes no kernel "
            "block sizes (its rows hold ids of blocks of the spec's own size)"
        )


def answer_tree_version() -> bool:
    """Give a ``vllm`` without distribution metadata (a checkout) a version for ``importlib.metadata``.

    vLLM's ``triton_utils`` calls ``importlib.metadata.version("vllm")`` while
    deciding whether Triton is usable; for a tree that was never installed the
    lookup fails and vLLM silently replaces Triton with a placeholder. Only the
    name ``vllm`` is answered, and only when no metadata exists. True if applied.
    """
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
