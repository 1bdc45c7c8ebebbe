"""SGLang's own ``TorchNativeAttnBackend`` on a batch's cross-attention layer, in the worker (imports torch).

``TorchNativeAttnBackend`` (``layers/attention/torch_native_backend.py``) is the
backend SGLang runs on a CPU, and from 0.5.13 on it addresses the shared row
itself: a cross-attention layer reads columns ``[0, encoder_lens)`` of the
request's ``req_to_token`` row, a self-attention layer ``[encoder_lens,
encoder_lens + seq_lens)``. The harness runs its own ``forward_extend`` (which
writes the encoder's K/V through ``set_kv_buffer`` at the release's
``encoder_out_cache_loc``) and ``forward_decode`` on the rows the read side lays
out with the release's own steps (:func:`~crossattn_sizing.engine.sglang.run.prepare_batch`:
its ``ReqToTokenPool``, its extend stripping, its decode rule), and hands the
outputs back for the judge to compare with the reference.

What runs as the release's own and what stands in is the range's
:class:`~crossattn_sizing.engine.sglang.releases.AttentionStep` and
:data:`~crossattn_sizing.engine.sglang.releases.ATTENTION_STAND_INS`. A range
without the cross-attention path, a tree without the file, or a stand-in the
backend reaches is "not run", naming the piece.
"""

from __future__ import annotations

import math
import types
from collections.abc import Sequence
from typing import Any

import torch

from crossattn_sizing.core.batch_requests import Request, extended
from crossattn_sizing.core.read_gather import ReadOutOfRow
from crossattn_sizing.engine.adapter import AdapterGap
from crossattn_sizing.engine.sglang.attention_client import unpack
from crossattn_sizing.engine.sglang.releases import AttentionStep
from crossattn_sizing.engine.sglang.run import (
    ExtendMismatch,
    Prepared,
    SglangRelease,
    _not_run,
    _StandInBase,
    extend_failure,
    prepare_batch,
)
from crossattn_sizing.engine.sglang.source import (
    Missing,
    execute,
    parse_release_file,
    require_methods,
    take,
)

BACKEND_METHODS = ("init_forward_metadata", "forward_extend", "forward_decode", "_run_sdpa_forward_extend",
                   "_run_sdpa_forward_decode")
"""The backend's methods the step calls or they call (a release without one is "not run", naming it)."""

_LOADED: dict[str, Any] = {}


def backend_class(rel: SglangRelease) -> Any:
    """The release's ``TorchNativeAttnBackend``, executed from its own file (once per worker).

    Its base class stands in (an empty class); every name it imports from the
    release is :class:`~crossattn_sizing.engine.sglang.source.Missing` but the
    range's helpers (``KVWriteLoc``), which run as the release's own.
    """
    key = str(rel.root)
    if key in _LOADED:
        return _LOADED[key]
    step = rel.range.attention
    if not isinstance(step, AttentionStep):  # the range has no cross-attention path: named, not run
        raise AdapterGap("TorchNativeAttnBackend", f"release range {rel.range.label()}: {step}",
                         "sglang/srt/layers/attention/torch_native_backend.py")
    module = parse_release_file(rel.root, step.backend.file)
    require_methods(module, step.backend.name, BACKEND_METHODS)
    stand: dict[str, Any] = {"AttentionBackend": _StandInBase}
    for helper in step.helpers:
        if helper.name in module.imports:  # the release's own definition, from the file it names
            helper_file = parse_release_file(rel.root, helper.file)
            helper_ns = execute(helper_file, stand, only=(helper.name,))
            stand[helper.name] = take(helper_ns, helper.name, helper_file)
    cls = take(execute(module, stand, only=(step.backend.name,)), step.backend.name, module)
    _LOADED[key] = cls
    return cls


class KVPool:
    """``token_to_kv_pool`` stood in: one K and one V buffer (layer 0), NaN-poisoned, written by slot.

    ``set_kv_buffer`` does what the release's own CPU fallback in
    ``_set_kv_buffer_impl`` does (``k_cache[loc] = k``); the location is the
    release's ``KVWriteLoc`` (0.5.14 on) or the bare tensor (0.5.13). A slot
    nobody wrote stays NaN, so a read of one shows in the output.
    """

    def __init__(self, slots: int, kv_heads: int, head_dim: int) -> None:
        self.k = torch.full((slots, kv_heads, head_dim), math.nan, dtype=torch.float32)
        self.v = torch.full((slots, kv_heads, head_dim), math.nan, dtype=torch.float32)
        self.written = 0

    def set_kv_buffer(self, layer: Any, loc: Any, cache_k: torch.Tensor, cache_v: torch.Tensor,
                      *_: Any, **__: Any) -> None:
        """Write ``cache_k``/``cache_v`` at the slots ``loc`` names."""
        where = getattr(loc, "loc", loc).long()
        self.k[where] = cache_k.reshape(-1, *self.k.shape[1:]).to(self.k.dtype)
        self.v[where] = cache_v.reshape(-1, *self.v.shape[1:]).to(self.v.dtype)
        self.written += int(where.numel())

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        """Layer ``layer_id``'s keys (one layer: the cross-attention layer)."""
        return self.k

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        """Layer ``layer_id``'s values."""
        return self.v


def _layer(heads: int, kv_heads: int, head_dim: int, scale: float) -> Any:
    """The cross-attention layer (``RadixAttention``) stood in: what the backend reads of it."""
    return types.SimpleNamespace(
        layer_id=0, is_cross_attention=True, tp_q_head_num=heads, tp_k_head_num=kv_heads,
        tp_v_head_num=kv_heads, qk_head_dim=head_dim, v_head_dim=head_dim, head_dim=head_dim,
        scaling=scale, sliding_window_size=None, logit_cap=0.0,
        attn_type=Missing("RadixAttention.attn_type (a cross-attention layer never needs it)"),
    )


def _backend(cls: Any, prepared: Prepared, kv: KVPool) -> Any:
    """The stand-in ``self``: the release's class, none of its ``__init__``."""
    backend = object.__new__(cls)
    backend.__dict__.update(
        forward_metadata=None, device="cpu", req_to_token_pool=prepared.pool, token_to_kv_pool=kv,
        use_sliding_window_kv_pool=False, swa_out_cache_loc=None,
    )
    return backend


def _forwards(rel: SglangRelease, prepared: Prepared, kv: KVPool) -> tuple[Any, Any]:
    """The extend and decode ``ForwardBatch`` stood in, from the release's own extend output and decode."""
    ext = prepared.extend
    common = {"req_pool_indices": prepared.req_pool_indices, "req_to_token_pool": prepared.pool,
              "token_to_kv_pool": kv, "batch_size": int(prepared.req_pool_indices.numel()), "spec_info": None}
    extend = types.SimpleNamespace(
        **common, forward_mode=rel.forward_mode.EXTEND, seq_lens=ext.seq_lens,
        seq_lens_cpu=ext.seq_lens.cpu(), seq_lens_sum=int(ext.seq_lens.sum()),
        extend_seq_lens=torch.tensor(ext.extend_lens, dtype=torch.int32),
        extend_prefix_lens=torch.tensor(ext.prefix_lens, dtype=torch.int32),
        encoder_lens=ext.encoder_lens, out_cache_loc=ext.out_cache_loc,
        encoder_out_cache_loc=ext.encoder_out_cache_loc, out_cache_loc_is_physical=False,
    )
    decode = types.SimpleNamespace(
        **common, forward_mode=rel.forward_mode.DECODE, seq_lens=prepared.seq_lens,
        seq_lens_cpu=prepared.seq_lens.clone(), seq_lens_sum=int(prepared.seq_lens.sum()),
        encoder_lens=prepared.encoder_lens, out_cache_loc=None, encoder_out_cache_loc=None,
        out_cache_loc_is_physical=False,
    )
    return extend, decode


def run_attention(rel: SglangRelease, req: dict[str, Any]) -> dict[str, Any]:
    """One batch through the release's cross-attention layer: ``{"verdict": "ran", "extend", "decode"}``.

    ``req``: ``context_len``, ``batch`` (``[[E, prompt, d, cached], ...]``), ``heads``,
    ``kv_heads``, ``head_dim``, ``scale``, and per request the packed float32
    ``q_extend`` (``[extended prompt tokens, heads, head_dim]``), ``q_decode`` (``[heads,
    head_dim]``), ``k`` and ``v`` (``[E, kv_heads, head_dim]``). A request whose
    cached prefix covers its encoder (``cached >= E``) had its encoder K/V written by
    the earlier request that computed the prefix: the harness writes them at its
    prefix slots (that request's forward stood in), and the extend computes only
    the prompt tokens past the prefix. The outputs
    are per request: the extend's ``[extended prompt tokens][heads * head_dim]`` and the
    decode's ``[heads * head_dim]``. ``fails`` where the release's extend output
    is not the draw's; ``not run`` for anything the harness cannot run.
    """
    batch: Sequence[Request] = [tuple(int(x) for x in r) for r in req["batch"]]
    heads, kv_heads, head_dim = int(req["heads"]), int(req["kv_heads"]), int(req["head_dim"])
    step = "loading TorchNativeAttnBackend from sglang/srt/layers/attention/torch_native_backend.py"
    try:
        cls = backend_class(rel)
        step = "laying the batch into the release's pool (the read side's steps)"
        prepared = prepare_batch(rel, int(req["context_len"]), batch)
    except ExtendMismatch as err:
        return extend_failure(err)
    except ReadOutOfRow as err:
        return {"verdict": "not run",
                "reason": f"the batch does not fit the release's rows (the write side fails: row {err.row} "
                          f"column {err.column}, width {err.width})"}
    except Exception as exc:  # the adapter's gap (a missing file or definition): not run, naming it
        return _not_run(rel, exc, step)
    slots = 1 + max(int(ids.max()) for ids in prepared.ids)
    kv = KVPool(slots, kv_heads, head_dim)
    layer = _layer(heads, kv_heads, head_dim, float(req["scale"]))
    q_ext = torch.cat([unpack(q, (-1, heads * head_dim)) for q in req["q_extend"]])
    q_dec = torch.cat([unpack(q, (1, heads * head_dim)) for q in req["q_decode"]])
    keys = [unpack(x, (-1, kv_heads, head_dim)) for x in req["k"]]
    values = [unpack(x, (-1, kv_heads, head_dim)) for x in req["v"]]
    fresh = [extended(r)[0] > 0 for r in batch]  # the extend computes its encoder K/V (not cached)
    for i, request in enumerate(batch):  # a cached encoder: the earlier request's write, stood in
        if request[0] and not fresh[i]:
            kv.set_kv_buffer(layer, prepared.ids[i][: request[0]], keys[i], values[i])
    kv.written = 0  # from here on, what the release writes
    empty = torch.zeros(0, kv_heads, head_dim)
    k = torch.cat([empty, *(x for x, f in zip(keys, fresh, strict=True) if f)])
    v = torch.cat([empty, *(x for x, f in zip(values, fresh, strict=True) if f)])
    try:
        backend = _backend(cls, prepared, kv)
        extend, decode = _forwards(rel, prepared, kv)
        step = "TorchNativeAttnBackend.init_forward_metadata (extend)"
        backend.init_forward_metadata(extend)
        step = "TorchNativeAttnBackend.forward_extend (cross-attention layer)"
        out_ext = backend.forward_extend(q_ext, k, v, layer, extend, save_kv_cache=True)
        step = "TorchNativeAttnBackend.init_forward_metadata (decode)"
        backend.init_forward_metadata(decode)
        step = "TorchNativeAttnBackend.forward_decode (cross-attention layer)"
        out_dec = backend.forward_decode(q_dec, None, None, layer, decode, save_kv_cache=False)
    except Exception as exc:  # the adapter's gap, or the release's own assert: not a verdict on it
        return _not_run(rel, exc, step)
    out_ext = out_ext.reshape(-1, heads * head_dim).float()
    out_dec = out_dec.reshape(-1, heads * head_dim).float()
    per_request, start = [], 0
    for request in batch:
        rows = extended(request)[1]
        per_request.append(out_ext[start : start + rows].tolist())
        start += rows
    return {"verdict": "ran", "extend": per_request, "decode": out_dec.tolist(), "kv_written": kv.written}
