"""The release's own KV-write, attention and merge kernels, found and called inside its worker.

Imported by :mod:`crossattn_sizing.engine.release` only (it needs the release
on ``sys.path``). Each step of the implementation interface has a list of
places vLLM has kept the function (paths move between releases): the first
that imports is the one that runs, and its dotted name is the step's
provenance. A release that has none of them reports the step as missing, with
what was tried, and the harness's own kernel stands in for it (the client
says so in the implementation's name and provenance).

Only a missing ``vllm.*`` module means "not in this release"; any other
missing module propagates, so the client installs it and asks again, as for
the release's import.
"""

from __future__ import annotations

import importlib
from typing import Any

SLOT_MAPPING = "vllm.v1.worker.gpu.block_table.BlockTables.compute_slot_mappings"
"""The slot mapping runs through the release's ``BlockTables`` (its ``_compute_slot_mappings_kernel``)."""

CANDIDATES: dict[str, tuple[str, ...]] = {
    "write_kv": (
        "vllm.v1.attention.ops.triton_reshape_and_cache_flash.triton_reshape_and_cache_flash",
        "vllm.attention.ops.triton_reshape_and_cache_flash.triton_reshape_and_cache_flash",
    ),
    "paged_attention": (
        "vllm.v1.attention.ops.triton_decode_attention.decode_attention_fwd",
        "vllm.attention.ops.triton_decode_attention.decode_attention_fwd",
    ),
    "merge": (
        "vllm.v1.attention.ops.dcp.cp_lse_ag_out_ar",
        "vllm.v1.attention.ops.common.cp_lse_ag_out_ar",
        "vllm.attention.ops.common.cp_lse_ag_out_ar",
    ),
    "merge_pairs": (
        "vllm.v1.attention.ops.triton_merge_attn_states.merge_attn_states",
        "vllm.attention.ops.triton_merge_attn_states.merge_attn_states",
    ),
}
"""Where releases keep each kernel, newest layout first (dotted module path, then the function).

``merge`` is the release's DCP combination as its decode path does it: each
rank's partial corrected by ``correct_attn_out`` against every rank's LSE
(all-gathered), then summed (all-reduced). ``merge_pairs`` is the release's
two-way ``merge_attn_states``: it serves the shapes the correction kernel
cannot take (see :func:`correctable`), and a release without the DCP path.
"""

NUM_KV_SPLITS = 4
"""Key splits of the decode kernel's first stage (what vLLM's Triton MLA decode passes); the second
stage combines them with their log-sum-exp, so a split count changes the order of sums, not the result."""


def correctable(num_ranks: int, head_dim: int) -> bool:
    """Whether the release's correction kernel takes this shape: it spans the ranks and the head
    dimension with ``tl.arange``, which needs powers of two (on a GPU too: other shapes do not compile)."""
    return all(n >= 1 and n & (n - 1) == 0 for n in (num_ranks, head_dim))


class RankGroup:
    """Rank ``rank``'s view of a DCP group whose ranks all live in this one process.

    The release's ``cp_lse_ag_out_ar`` reads ``world_size`` and
    ``rank_in_group``, all-gathers the LSEs and all-reduces the corrected
    output. Every rank's LSE is known before any rank runs, so the gather
    concatenates them in rank order, as a real group does; the all-reduce
    keeps what this rank contributes and the caller sums the ranks' parts.
    """

    def __init__(self, torch: Any, lses: list[Any], rank: int) -> None:
        self.torch = torch
        self.world_size = len(lses)
        self.rank_in_group = rank
        self.lses = lses
        self.contributed: Any = None

    def all_gather(self, tensor: Any, dim: int = 0) -> Any:
        torch = self.torch
        own = self.lses[self.rank_in_group].contiguous().view(torch.uint8)  # bitwise: NaN equals itself
        if not torch.equal(tensor.contiguous().view(torch.uint8), own):
            raise AssertionError("the release gathered an LSE other than this rank's own")
        return torch.cat(self.lses, dim=dim)

    def all_reduce(self, tensor: Any) -> Any:
        self.contributed = tensor  # the caller's own copy of this rank's partial, corrected in place
        return tensor


def find(dotted: str) -> Any:
    """The function a dotted name names, or ``None`` when its ``vllm.*`` module is not in this release."""
    module, _, attr = dotted.rpartition(".")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "vllm":
            return None
        raise
    return getattr(mod, attr, None)


class ReleaseKernels:
    """The kernels found in the imported release, by step, and how to call each as vLLM's backends do."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.functions: dict[str, Any] = {}
        self.provenance: dict[str, str | None] = {"slot_mapping": SLOT_MAPPING}
        self.tried: dict[str, list[str]] = {}
        for step, places in CANDIDATES.items():
            self.tried[step] = list(places)
            for dotted in places:
                fn = find(dotted)
                if fn is not None:
                    self.functions[step] = fn
                    self.provenance[step] = dotted
                    break
            else:
                self.provenance[step] = None
        if self.provenance["merge"] is None and self.provenance["merge_pairs"] is not None:
            # A release without the DCP path: its two-way merge is how it combines partials.
            self.functions["merge"] = self.functions["merge_pairs"]
            self.provenance["merge"] = self.provenance["merge_pairs"]
            self.tried["merge"] += self.tried["merge_pairs"]

    def function(self, step: str) -> Any:
        fn = self.functions.get(step)
        if fn is None:
            raise LookupError(f"this release has no {step} kernel (tried {', '.join(self.tried[step])})")
        return fn

    def write_kv(self, key: Any, value: Any, key_cache: Any, value_cache: Any, slots: Any) -> None:
        """``triton_reshape_and_cache_flash``, unquantised cache (``"auto"``, unit scales), in place."""
        one = self.torch.tensor(1.0, dtype=self.torch.float32)
        self.function("write_kv")(key, value, key_cache, value_cache, slots, "auto", one, one)

    def paged_attention(
        self, query: Any, key_cache: Any, value_cache: Any, req_to_token: Any, seq_lens: Any, scale: float
    ) -> tuple[Any, Any]:
        """``decode_attention_fwd``: row ``b`` of ``query`` over the first ``seq_lens[b]`` keys of its row.

        The output buffer is fp32 (the interface's), so the kernel's second
        stage stores its fp32 accumulator unrounded; the LSE is its own.
        """
        torch = self.torch
        num, heads = query.shape[0], query.shape[1]
        out = torch.zeros(num, heads, value_cache.shape[-1], dtype=torch.float32)
        lse = torch.zeros(num, heads, dtype=torch.float32)
        logits = torch.empty(num, heads, NUM_KV_SPLITS, value_cache.shape[-1] + 1, dtype=torch.float32)
        self.function("paged_attention")(
            query, key_cache, value_cache, out, lse, req_to_token, seq_lens, logits, NUM_KV_SPLITS, scale,
            key_cache.shape[1],
        )  # fmt: skip
        return out, lse

    def merge(self, outs: list[Any], lses: list[Any]) -> tuple[Any, Any, str]:
        """The ranks' partials combined as the release's DCP decode does it; ``(out, lse, what ran)``.

        With ``cp_lse_ag_out_ar`` and a shape its kernel takes: each rank calls
        it with its own partial and a :class:`RankGroup`, and the ranks' parts
        are summed (the all-reduce). Otherwise ``merge_attn_states`` folds them
        two at a time. The third item is the dotted name of what ran.
        """
        dcp = self.provenance["merge"] != self.provenance["merge_pairs"]
        if dcp and correctable(len(outs), outs[0].shape[-1]):
            return (*self._corrected(outs, lses), str(self.provenance["merge"]))
        return (*self._folded(outs, lses), str(self.provenance["merge_pairs"]))

    def _corrected(self, outs: list[Any], lses: list[Any]) -> tuple[Any, Any]:
        fn = self.function("merge")
        gathered = [lse.contiguous() for lse in lses]
        total, lse = None, None
        for rank, out in enumerate(outs):
            group = RankGroup(self.torch, gathered, rank)
            _, lse = fn(out.contiguous().clone(), gathered[rank], group, return_lse=True)
            total = group.contributed if total is None else total + group.contributed
        return total, lse.contiguous()

    def _folded(self, outs: list[Any], lses: list[Any]) -> tuple[Any, Any]:
        """``merge_attn_states`` two at a time; its LSE tensors are ``[heads, tokens]`` and contiguous
        (0.25 indexes them so)."""
        torch = self.torch
        fn = self.function("merge_pairs")
        out, lse = outs[0].contiguous(), lses[0].t().contiguous()
        for nxt_out, nxt_lse in zip(outs[1:], lses[1:], strict=True):
            merged = torch.empty_like(out)
            merged_lse = torch.empty_like(lse)
            fn(merged, out, lse, nxt_out.contiguous(), nxt_lse.t().contiguous(), merged_lse)
            out, lse = merged, merged_lse
        return out, lse.t().contiguous()
