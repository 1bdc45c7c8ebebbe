"""The stand-in objects SGLang's admission steps are handed, each field declared with a server's value.

The admission steps (:mod:`crossattn_sizing.engine.sglang.admission`) are the
release's own code, but the objects they read are the harness's: the request
(``Req``), ``TpModelWorker``'s and ``Scheduler``'s ``self``, and the settings
``get_schedule()`` returns. A field holding a value no server gives it is a
blind spot: a step that reads it answers for a server that does not exist.
(``origin_input_ids_unpadded`` once held the padded ids, so a scheduler whose
output cap measured the unpadded input, letting a request write past its row,
held.) So every field each builder below sets is in its table
(:data:`STAND_IN_FIELDS`): its value and which server code gives it that
value. ``tests/test_sglang_stand_in_fields.py`` checks that the objects built
set no undeclared field and, where the release has its own construction (its
``Req.__init__``, its models' ``pad_input_ids``), that it gives the request
the same ids.
"""

from __future__ import annotations

import types
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from crossattn_sizing.engine.sglang.source import Missing


@dataclass(frozen=True)
class Field:
    """One field of a stand-in object: ``path`` (dotted from the object), its ``value`` here, and ``why``
    a server's object holds that value (the SGLang code that sets it)."""

    path: str
    value: str
    why: str


PROMPT_ID = 1
"""Each text token's id in a stand-in request. The admission steps count ids and never read one; it differs
from :data:`ENCODER_PAD_ID` so the two parts of the padded ids stay apart."""

ENCODER_PAD_ID = 0
"""Each encoder placeholder's id: Whisper's ``pad_input_ids`` prepends zeros (Mllama its images' pad
values)."""

ROW_EXTRA = 4
"""``get_req_to_token_extra_context_len`` without speculative decoding (4 in every release of the table): the
row width a server's ``req_to_token_pool.max_context_len`` is, ``context_len`` plus this."""

MAX_PREFILL_TOKENS = 16384
"""``--max-prefill-tokens``'s default (ServerArgs)."""

REQUEST_FIELDS: tuple[Field, ...] = (
    Field("rid", "'drawn'", "the request's id; Req.__init__ keeps the one the tokenizer manager gives it "
          "(self.rid = rid); the steps only print it"),
    Field("origin_input_ids", "E encoder placeholders (ENCODER_PAD_ID) then the prompt's ids (PROMPT_ID): "
          "an array('q'), a list in ranges whose input_ids_are_lists; the prompt's ids alone when E = 0",
          "Req.__init__ keeps the tokenizer's ids; then the scheduler's handle_generate_request, for a "
          "request with encoder input, replaces them by the model's pad_input_ids output (Whisper prepends "
          "max_source_positions zeros, Mllama one pad value per image token), so the encoder part counts "
          "in the input; a request without one (E = 0) is not padded"),
    Field("origin_input_ids_unpadded", "the prompt's ids alone (PROMPT_ID), the encoder part not "
          "counted; the same object as origin_input_ids when E = 0",
          "Req.__init__ sets it to the ids it is built with (handle_generate_request passes no "
          "origin_input_ids_unpadded), before the scheduler pads origin_input_ids: the text before the "
          "encoder tokens are expanded in"),
    Field("sampling_params.max_new_tokens", "the max_new_tokens drawn",
          "the client's SamplingParams; init_req_max_new_tokens caps it in place"),
    Field("sampling_params.min_new_tokens", "0", "SamplingParams' default (the client sends none)"),
    Field("set_finish_with_abort", "keeps the message it is called with (the refusal)",
          "Req.set_finish_with_abort aborts the request with that message; init_req_max_new_tokens calls "
          "it when the prompt exceeds the pool's budget"),
)
"""The request as ``init_req_max_new_tokens`` and ``validate_input_length`` see it (:func:`request`)."""

WORKER_FIELDS: tuple[Field, ...] = (
    Field("model_config.context_len", "context_len drawn", "ModelConfig: --context-length, else the "
          "model's config"),
    *(Field(f"model_runner.{name}", "kv_capacity drawn", "ModelRunner: the KV pool's size in tokens "
            "(one GPU, no DCP: logical and effective equal physical)")
      for name in ("max_token_pool_size", "max_total_num_tokens", "effective_max_total_num_tokens",
                   "logical_max_total_num_tokens", "effective_logical_max_total_num_tokens")),
    Field("model_runner.max_running_requests", "1", "--max-running-requests 1 (the batch the worker runs "
          "is one request at a time); get_worker_info passes it through"),
    Field("model_runner.dcp_size", "1", "no decode context parallelism (--dcp-size 1)"),
    Field("model_runner.forward_stream", "None", "no CUDA stream on a CPU; get_worker_info passes it "
          "through"),
    Field("model_runner.req_to_token_pool.size", "1", "ReqToTokenPool: one row per running request"),
    Field("model_runner.req_to_token_pool.max_context_len", "context_len + ROW_EXTRA",
          "ReqToTokenPool's row width (context_len + get_req_to_token_extra_context_len, 4 without "
          "speculative decoding); get_worker_info passes it through"),
    Field("model_runner.req_to_token_pool.schedulable_token_capacity", "the capacity it is given",
          "no DCP interleave: every token of the pool is schedulable"),
    Field("model_runner.token_to_kv_pool.size", "kv_capacity drawn", "the KV pool's size in tokens"),
    Field("model_runner.token_to_kv_pool_allocator", "None", "read only by page_interleave_shard_size, "
          "stood in as 1 (no DCP interleave)"),
    Field("server_args.max_prefill_tokens", "MAX_PREFILL_TOKENS", "ServerArgs' default"),
    Field("server_args.max_queued_requests", "None", "ServerArgs' default (no queue limit)"),
    Field("server_args.dcp_size", "1", "no decode context parallelism"),
    Field("ps.attn_dcp_size", "1", "no decode context parallelism"),
    Field("dllm_algorithm", "None", "no --dllm-algorithm (a dLLM would take its block from the input limit)"),
    Field("max_total_num_tokens", "kv_capacity drawn", "TpModelWorker copies the runner's pool size"),
    Field("max_prefill_tokens", "MAX_PREFILL_TOKENS", "ServerArgs' default"),
    Field("max_running_requests", "1", "as model_runner.max_running_requests"),
    Field("max_queued_requests", "None", "ServerArgs' default"),
    Field("random_seed", "0", "a fixed --random-seed; get_worker_info passes it through"),
    Field("device", "'cpu'", "the device the worker runs on; get_worker_info passes it through"),
)
"""``TpModelWorker``'s ``self`` as its limit steps read it (built by :func:`worker_self`)."""

SCHEDULER_FIELDS: tuple[Field, ...] = (
    Field("max_new_tokens_limit", "None", "no SGLANG_MAX_NEW_TOKENS_LIMIT in the environment"),
    Field("max_req_len", "the 5th value of the release's get_worker_info", "Scheduler unpacks it from "
          "get_worker_info"),
    Field("max_total_num_tokens", "kv_capacity drawn", "Scheduler unpacks it from get_worker_info"),
    Field("page_size", "1", "--page-size 1"),
    Field("kv_shard_widening", "1", "no DCP: one shard"),
    Field("sliding_window_size", "None", "an encoder-decoder model's layers have no sliding window"),
    Field("chunked_prefill_size", "None", "--chunked-prefill-size -1 (the scheduler turns a size of 0 or "
          "less into None); only passed on to the pool's budget, which the base allocator does not read"),
    Field("server_args.dcp_size", "1", "no decode context parallelism"),
    Field("token_to_kv_pool_allocator.page_size", "1", "the allocator's page size, --page-size 1"),
    Field("token_to_kv_pool_allocator.max_new_tokens_for_memory",
          "the release's own BaseTokenToKVPoolAllocator.max_new_tokens_for_memory bound to this allocator "
          "(a Missing that names it where the tree has none)",
          "the token-granular allocator a page size of 1 gives"),
)
"""``Scheduler``'s ``self`` as ``init_req_max_new_tokens`` reads it (built by :func:`scheduler_self`)."""

SCHEDULE_FIELDS: tuple[Field, ...] = (
    Field("page_size", "1", "--page-size 1"),
    Field("max_prefill_tokens", "MAX_PREFILL_TOKENS", "ServerArgs' default"),
    Field("max_queued_requests", "None", "ServerArgs' default"),
)
"""What ``get_schedule()`` returns to the limit steps (built by :func:`schedule_settings`)."""

STAND_IN_FIELDS: dict[str, tuple[Field, ...]] = {
    "the request (Req)": REQUEST_FIELDS,
    "TpModelWorker's self": WORKER_FIELDS,
    "Scheduler's self": SCHEDULER_FIELDS,
    "get_schedule()": SCHEDULE_FIELDS,
}
"""Every stand-in object the admission steps are handed, by what it stands in for, and its fields."""


def request_ids(encoder_len: int, prompt_len: int, as_lists: bool) -> tuple[Any, Any]:
    """``(origin_input_ids, origin_input_ids_unpadded)`` as a server holds them (:data:`REQUEST_FIELDS`)."""
    unpadded: Any = array("q", [PROMPT_ID]) * prompt_len
    padded: Any = array("q", [ENCODER_PAD_ID]) * encoder_len + unpadded if encoder_len else unpadded
    if as_lists:
        unpadded = list(unpadded)
        padded = list(padded) if encoder_len else unpadded
    return padded, unpadded


def request(encoder_len: int, prompt_len: int, max_new: int, as_lists: bool,
            on_abort: Callable[[str], Any]) -> Any:  # fmt: skip
    """The request ``(E, prompt, max_new)`` as the scheduler's admission steps read it
    (:data:`REQUEST_FIELDS`); ``on_abort`` receives the message of an abort."""
    padded, unpadded = request_ids(encoder_len, prompt_len, as_lists)
    return types.SimpleNamespace(
        rid="drawn", origin_input_ids=padded, origin_input_ids_unpadded=unpadded,
        sampling_params=types.SimpleNamespace(max_new_tokens=max_new, min_new_tokens=0),
        set_finish_with_abort=on_abort,
    )


def worker_self(context_len: int, kv_capacity: int) -> Any:
    """``TpModelWorker``'s ``self`` holding the drawn server (:data:`WORKER_FIELDS`)."""
    pool = types.SimpleNamespace(size=1, max_context_len=context_len + ROW_EXTRA,
                                 schedulable_token_capacity=lambda capacity: capacity)
    runner = types.SimpleNamespace(
        max_token_pool_size=kv_capacity, max_total_num_tokens=kv_capacity,
        effective_max_total_num_tokens=kv_capacity, logical_max_total_num_tokens=kv_capacity,
        effective_logical_max_total_num_tokens=kv_capacity, max_running_requests=1, dcp_size=1,
        forward_stream=None, req_to_token_pool=pool, token_to_kv_pool=types.SimpleNamespace(size=kv_capacity),
        token_to_kv_pool_allocator=None,
    )
    server_args = types.SimpleNamespace(max_prefill_tokens=MAX_PREFILL_TOKENS, max_queued_requests=None,
                                        dcp_size=1)
    return types.SimpleNamespace(
        model_config=types.SimpleNamespace(context_len=context_len), model_runner=runner,
        server_args=server_args, ps=types.SimpleNamespace(attn_dcp_size=1), dllm_algorithm=None,
        max_total_num_tokens=kv_capacity, max_prefill_tokens=MAX_PREFILL_TOKENS, max_running_requests=1,
        max_queued_requests=None, random_seed=0, device="cpu",
    )


def scheduler_self(max_req_len: int, kv_capacity: int, pool_budget: Callable[..., Any] | None) -> Any:
    """``Scheduler``'s ``self`` (:data:`SCHEDULER_FIELDS`); ``pool_budget`` is the release's own
    ``max_new_tokens_for_memory``, or None where the tree has none."""
    allocator = types.SimpleNamespace(page_size=1)
    allocator.max_new_tokens_for_memory = (
        Missing("BaseTokenToKVPoolAllocator.max_new_tokens_for_memory (the tree has none)")
        if pool_budget is None else types.MethodType(pool_budget, allocator))  # fmt: skip
    return types.SimpleNamespace(
        max_new_tokens_limit=None, max_req_len=max_req_len, max_total_num_tokens=kv_capacity, page_size=1,
        kv_shard_widening=1, sliding_window_size=None, chunked_prefill_size=None,
        server_args=types.SimpleNamespace(dcp_size=1), token_to_kv_pool_allocator=allocator,
    )


def schedule_settings() -> Any:
    """What ``get_schedule()`` returns (:data:`SCHEDULE_FIELDS`)."""
    return types.SimpleNamespace(page_size=1, max_prefill_tokens=MAX_PREFILL_TOKENS, max_queued_requests=None)


__all__ = [
    "ENCODER_PAD_ID",
    "PROMPT_ID",
    "STAND_IN_FIELDS",
    "Field",
    "request",
    "request_ids",
    "schedule_settings",
    "scheduler_self",
    "worker_self",
]
