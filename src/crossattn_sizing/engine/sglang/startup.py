"""SGLang's start-up batches through the release's own code: the CUDA-graph runner's dummy decode batch.

Before any request arrives, SGLang's CUDA-graph runner captures one decode
graph per capture size. Each capture runs a dummy batch of that size, laid out
from the runner's buffers: every request at ``req_to_token`` row 0, its
decoder length the backend's ``get_cuda_graph_seq_len_fill_value()`` and its
encoder length the runner's ``encoder_len_fill_value`` (from 0.5.13:
``hf_config.max_source_positions``, "so cross-attention kernels are captured").
A padded slot of a smaller batch replays the same values.

What runs as the release wrote it: the runner's own statements that set the
two fill values (its ``__init__``'s, alone, at their own lines); FA3's
``get_cuda_graph_seq_len_fill_value``, ``init_cuda_graph_state`` (the capture
buffers), its capture and replay entry ``init_forward_metadata_out_graph``,
and ``forward_decode`` with the kernel recorded
(:mod:`crossattn_sizing.engine.sglang.kernel_calls`). What stands in is
:data:`~crossattn_sizing.engine.sglang.releases.STARTUP_STAND_INS`.

The judges (:func:`judge_dummy`, then :func:`~crossattn_sizing.engine.sglang.kernel_calls.judge_call`):
every dummy request's lengths fit its row (``E + d`` columns of row 0,
``context_len`` + the release's extra wide); every length and page-table
column the kernel is handed is the request's own (columns ``[0, E)`` of its row
for cross-attention, ``[E, E + d)`` for self-attention); a gather past the row
is the guard's observation. Imports torch (the worker's side).
"""

from __future__ import annotations

import ast
import types
from collections.abc import Sequence
from typing import Any

import torch

from crossattn_sizing.core.read_gather import ReadOutOfRow
from crossattn_sizing.engine.adapter import AdapterGap, engine_frame
from crossattn_sizing.engine.sglang import kernel_calls
from crossattn_sizing.engine.sglang.admission import assignments_alone
from crossattn_sizing.engine.sglang.releases import StartupStep, Step
from crossattn_sizing.engine.sglang.run import (
    GuardedTable,
    SglangRelease,
    _not_run,
    backend_self,
    decode_calls,
)
from crossattn_sizing.engine.sglang.source import find_class, parse_release_file
from crossattn_sizing.engine.sglang.startup_client import PATHS

FILL_ATTRIBUTES = ("seq_len_fill_value", "encoder_len_fill_value")
"""What the runner's ``__init__`` sets for the dummy batch: its decoder and its encoder lengths."""

DUMMY_PAST_ROW = "a start-up (CUDA-graph) dummy request is longer than its row"
KERNEL_ARGS_WRONG = "a start-up batch hands the kernel an index or length that is not the dummy request's"
READ_PAST_ROW = "a start-up batch gathers a column outside its row"
"""Each verdict's headline: the step that failed, for the property's first line."""


def fill_lines(rel: SglangRelease, runner: Step) -> dict[str, str]:
    """``attribute -> "file:line"`` of the runner's statement setting each fill value (for a finding)."""
    module = parse_release_file(rel.root, runner.file)
    cls, _, method = runner.name.partition(".")
    init = next((n for n in find_class(module, cls).body
                 if isinstance(n, ast.FunctionDef) and n.name == method), None)  # fmt: skip
    out: dict[str, str] = {}
    for node in init.body if init is not None else ():
        for target in node.targets if isinstance(node, ast.Assign) else ():
            if isinstance(target, ast.Attribute) and target.attr in FILL_ATTRIBUTES:
                out[target.attr] = f"{runner.file}:{node.lineno}"
    return out


def dummy_fills(rel: SglangRelease, runner: Step, backend: Any, context_len: int,
                max_source_positions: int | None) -> tuple[int, int]:
    """``(seq_len_fill_value, encoder_len_fill_value)`` as the release's runner sets them.

    Its ``__init__``'s statements that assign them run alone on a runner ``self`` holding what they read:
    the backend (the release's, for ``get_cuda_graph_seq_len_fill_value``), no dLLM, an encoder-decoder
    model whose ``hf_config`` declares ``max_source_positions`` or not.
    """
    module = parse_release_file(rel.root, runner.file)
    alone = assignments_alone(module, runner, FILL_ATTRIBUTES, parameters=True)
    if alone is None:
        raise AdapterGap(runner.name, f"{runner.name} sets neither of {', '.join(FILL_ATTRIBUTES)} "
                         "(renamed or moved in this release?)", runner.file)
    hf_config = types.SimpleNamespace()
    if max_source_positions is not None:
        hf_config.max_source_positions = max_source_positions
    model_runner = types.SimpleNamespace(model_config=types.SimpleNamespace(
        hf_config=hf_config, is_encoder_decoder=True, context_len=context_len))
    runner_self = types.SimpleNamespace(attn_backend=backend, dllm_config=None, is_encoder_decoder=True,
                                        model_runner=model_runner)
    import inspect

    params = list(inspect.signature(alone).parameters)
    alone(runner_self, *([model_runner] if len(params) > 1 else []))
    missing = [a for a in FILL_ATTRIBUTES if not hasattr(runner_self, a)]
    if missing:
        raise AdapterGap(runner.name, f"{runner.name} does not set {', '.join(missing)} in the "
                         "statements the harness runs", runner.file)
    return int(runner_self.seq_len_fill_value), int(runner_self.encoder_len_fill_value)


def judge_dummy(encoder_len: int, seq_len: int, width: int, tables: dict[str, int]) -> str | None:
    """Why a dummy request of ``encoder_len`` encoder and ``seq_len`` decoder tokens does not fit; None when
    it fits.

    Its keys are columns ``[0, E + d)`` of a row ``width`` wide (the cross-attention kernel reads
    ``[0, E)``, the self-attention kernel ``[E, E + d)``), and each kernel's page table, as the release's
    ``init_cuda_graph_state`` sized it (``tables``: ``"encoder"`` and ``"decoder"`` columns), must hold
    that kernel's columns.
    """
    if encoder_len < 0 or seq_len < 0:
        return f"the dummy request has a negative length (encoder {encoder_len}, decoder {seq_len})"
    if encoder_len + seq_len > width:
        return (f"the dummy request has {encoder_len} encoder and {seq_len} decoder tokens: the kernels read "
                f"columns [0, {encoder_len + seq_len}) of its row, which has {width} (last column "
                f"{encoder_len + seq_len - 1})")
    for part, length in (("encoder", encoder_len), ("decoder", seq_len)):
        if part in tables and length > tables[part]:
            return (f"the dummy request's {length} {part} tokens do not fit the {part} page table the "
                    f"capture buffers hand the kernel ({tables[part]} columns, init_cuda_graph_state)")
    return None


def run_startup(rel: SglangRelease, context_len: int, capture_bs: Sequence[int], max_running: int,
                max_source_positions: int | None) -> dict[str, Any]:
    """The start-up batches of one server, judged: ``{"paths": {path: verdict}, "fills", "width",
    "said"}``, each path's verdict ``holds``, ``fails`` (``headline``, ``message``, ``where``: the
    release's ``file:line``, ``bs``) at its first capture size that does not hold, or ``not run`` with the
    reason."""
    step = rel.range.startup
    if isinstance(step, str):
        reason = f"{rel.range.label()}: {step}"
        return {"paths": {path: {"verdict": "not run", "reason": reason} for path in PATHS}}
    where = "laying out the CUDA-graph runner's dummy batch"
    try:
        runner = step.runner(rel.root)
        lines = fill_lines(rel, runner)
        width = context_len + rel.row_extra()
        pool = rel.pool_class(size=max_running, max_context_len=width, device="cpu",
                              enable_memory_saver=False)
        table = GuardedTable(pool.req_to_token)
        pool.req_to_token = table
        rows, cols = table.tensor.shape
        table.tensor.copy_((1 + torch.arange(rows * cols, dtype=torch.int64)).view(rows, cols))  # distinct
        backend = backend_self(rel, pool, table, context_len, 1 + rows * cols)
        # As the release's __init__ sizes them (page size 1): the capture buffers' page tables are
        # max_num_pages = max_context_len wide, and the metadata kernel writes that many columns a row.
        backend.__dict__.update(max_context_len=context_len, max_num_pages=context_len,
                                is_encoder_decoder=True, device="cpu", needs_cpu_seq_lens=False,
                                skip_prefill=False, is_draft_runner=False, _verify_mask=None,
                                target_verify_metadata={}, decode_cuda_graph_metadata={},
                                forward_metadata_spec_decode_expand=None, speculative_num_draft_tokens=None)
        seq_fill, enc_fill = dummy_fills(rel, runner, backend, context_len, max_source_positions)
        where = "FlashAttentionBackend.init_cuda_graph_state"
        backend.init_cuda_graph_state(max(capture_bs), max(capture_bs))
        tables = {"decoder": int(backend.decode_cuda_graph_metadata["page_table"].shape[1])}
        encoder = getattr(backend, "encoder_metadata", {}).get("encoder_page_table")
        if encoder is not None:
            tables["encoder"] = int(encoder.shape[1])
    except Exception as exc:  # the adapter's gap or a stand-in the release reached: not run, named
        gap = _not_run(rel, exc, where)
        return {"paths": {path: dict(gap) for path in PATHS}}
    fills = {"seq_len_fill_value": seq_fill, "encoder_len_fill_value": enc_fill}
    said = (f"capture sizes {sorted(set(capture_bs))}; each dummy request: row 0, encoder_lens {enc_fill} "
            f"({lines.get('encoder_len_fill_value', '?')}), seq_lens {seq_fill} "
            f"({lines.get('seq_len_fill_value', '?')}); row width {width}")
    out: dict[str, Any] = {"fills": fills, "width": width, "said": said, "paths": {}}
    problem = judge_dummy(enc_fill, seq_fill, width, tables)
    if problem is not None:  # the same batch on both paths
        culprit = "seq_len_fill_value" if enc_fill == 0 or seq_fill > min(width, tables["decoder"]) else \
            "encoder_len_fill_value"
        where = lines.get(culprit, runner.file)
        out["paths"] = {path: {"verdict": "fails", "headline": DUMMY_PAST_ROW, "message": f"{problem}; "
                               f"{said}", "where": where, "bs": max(capture_bs)} for path in PATHS}
        return out
    row = table.tensor[0].to(torch.int64)
    for path in PATHS:
        verdict: dict[str, Any] = {"verdict": "holds"}
        for bs in sorted(set(capture_bs), reverse=True):  # the runner captures the largest first
            verdict = _one(rel, step, backend, bs, path, seq_fill, enc_fill, row)
            if verdict["verdict"] != "holds":
                if "message" in verdict:
                    verdict["message"] = f"capture size {bs}, {path}: {verdict['message']}; {said}"
                verdict["bs"] = bs
                break
        out["paths"][path] = verdict
    return out


def _one(rel: SglangRelease, step: StartupStep, backend: Any, bs: int, path: str, seq_fill: int,
         enc_fill: int, row: torch.Tensor) -> dict[str, Any]:
    """One capture size on one path: the release's entry builds the metadata, its ``forward_decode`` calls
    the (recorded) kernel, and every call is judged against the dummy requests' own row."""
    forward = types.SimpleNamespace(
        batch_size=bs, forward_mode=rel.forward_mode.DECODE, spec_info=None, kv_loc_plan=None,
        req_pool_indices=torch.zeros(bs, dtype=torch.int64),
        seq_lens=torch.full((bs,), seq_fill, dtype=torch.int64),
        seq_lens_cpu=torch.full((bs,), seq_fill, dtype=torch.int64), seq_lens_sum=bs * seq_fill,
        encoder_lens=torch.full((bs,), enc_fill, dtype=torch.int32),
        positions=torch.zeros(bs, dtype=torch.int64), out_cache_loc=torch.zeros(bs, dtype=torch.int64),
        req_to_token_pool=backend.req_to_token_pool,
    )
    entry = step.entry
    try:
        method = getattr(backend, entry, None)
        if method is None:
            raise AdapterGap(f"FlashAttentionBackend.{entry}", f"the release's FlashAttentionBackend has no "
                             f"{entry} (the harness's capture entry)", rel.range.steps["metadata"].file)
        if path == "capture":
            method(forward, in_capture=True)
        else:
            method(forward)
        calls = decode_calls(backend, forward, bs)
    except ReadOutOfRow as err:
        return {"verdict": "fails", "headline": READ_PAST_ROW, "row": err.row, "column": err.column,
                "width": err.width, "message": str(err), "where": engine_frame(err, rel.root)[0]}
    except Exception as exc:
        return _not_run(rel, exc, f"FlashAttentionBackend.{entry} on the dummy batch ({path}, size {bs})")
    for attention, call in calls:
        if attention == "self":
            lengths, own = [seq_fill] * bs, [row[enc_fill : enc_fill + seq_fill]] * bs
        else:
            lengths, own = [enc_fill] * bs, [row[:enc_fill]] * bs
        problem = kernel_calls.judge_call(call, attention, lengths, own)
        if problem is not None:
            return {"verdict": "fails", "headline": KERNEL_ARGS_WRONG, "message": problem,
                    "where": f"{rel.range.steps['metadata'].file} (FlashAttentionBackend.{entry})"}
    return {"verdict": "holds"}


__all__ = ["FILL_ATTRIBUTES", "PATHS", "dummy_fills", "judge_dummy", "run_startup"]
