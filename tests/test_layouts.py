"""The engine-neutral layouts and admission rules (core/layouts.py, core/admission_rules.py,
core/read_gather.py) on the figures read from each engine's source (docs/spec.md, per engine)."""

from __future__ import annotations

import pytest

from crossattn_sizing.core import admission
from crossattn_sizing.core.admission_rules import EngineRequest, SglangAdmission, VllmAdmission, admitted
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.core.layouts import CrossPool, RowPerGroup, RowUse, SharedRow, write_overflows
from crossattn_sizing.core.read_gather import (
    BatchRequest,
    GuardedRows,
    ReadOutOfRow,
    bounded_gather,
    first_read_violation,
    sglang_fa3_gather,
)

MLLAMA_4_TILES = 4 * ((560 // 14) ** 2 + 1)
ISSUE_BATCH = (BatchRequest(MLLAMA_4_TILES, 20 + 1), BatchRequest(0, 3000 + 1))
"""Issue 28's batch at its first decode step: Mllama, a 4-tile image and 20 text tokens; 3000 text tokens."""


def test_mllama_four_tiles_is_6404() -> None:
    assert MLLAMA_4_TILES == 6404


def test_sglang_admission_counts_encoder_tokens_in_the_input() -> None:
    rule = SglangAdmission(context_len=8192, kv_capacity=10**6)
    assert (rule.max_req_len, rule.max_req_input_len) == (8191, 8186)
    assert admitted(rule, EngineRequest(6404, 20, 100))
    assert admitted(rule, EngineRequest(0, 3000, 100))
    assert admitted(rule, EngineRequest(8000, 185))
    assert not admitted(rule, EngineRequest(8000, 186))  # input == max_req_input_len is refused
    assert rule.output_cap(EngineRequest(8000, 100, 5000)) == 8191 - 8100 - 1
    small_pool = SglangAdmission(context_len=8192, kv_capacity=4000)
    assert small_pool.max_req_input_len == 4000 - 1 - 5
    assert not admitted(small_pool, EngineRequest(6404, 20))


def test_sglang_admission_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        SglangAdmission(0, 10)
    with pytest.raises(ValueError):
        EngineRequest(-1, 0)


def test_admitted_sglang_requests_fit_the_shared_row() -> None:
    rule, row = SglangAdmission(8192, 10**6), SharedRow(8192)
    assert row.width == 8196 and SharedRow(8192, draft_tokens=3).width == 8199
    req = EngineRequest(6404, 1781, 10**6)
    assert admitted(rule, req)
    d = req.prompt_len + rule.output_cap(req)
    assert write_overflows(row, req.encoder_len, d) == []
    assert row.decode_column(6404, d - 1) == 6404 + d - 1 < row.width


def test_vllm_rule_is_the_admission_model() -> None:
    config = RunnerConfig(
        groups=(KVCacheGroup(GroupKind.FULL, 16), KVCacheGroup(GroupKind.CROSS, 16)),
        max_model_len=64, max_num_batched_tokens=100, max_num_reqs=2, max_num_encoder_input_tokens=80,
    )
    rule = VllmAdmission(config)
    for e in range(1, 120):
        assert admitted(rule, EngineRequest(e, 1)) == admission.admits(config, e)
    assert admitted(rule, EngineRequest(0, 10))  # a request with no encoder input is not refused
    layout = RowPerGroup(config, (4, 5))
    assert layout.rows(80, 64) == [RowUse("group 0 (full)", 4, 4, "entries"),
                                   RowUse("group 1 (cross)", 5, 5, "entries")]
    assert write_overflows(layout, 81, 64) == [RowUse("group 1 (cross)", 6, 5, "entries")]


def test_cross_pool_sized_from_max_input_len_misses_whisper() -> None:
    pool = CrossPool(self_max_len=448, cross_max_len=1024)  # TensorRT-LLM's default max_input_len
    assert write_overflows(pool, 1500, 10) == [RowUse("cross pool", 1500, 1024, "tokens"),
                                               RowUse("cross pool", 47, 32, "blocks")]  # 32 tokens a block
    assert write_overflows(pool, 0, 448) == []


def test_guarded_rows_refuse_a_read_past_the_row_before_reading() -> None:
    table = GuardedRows.for_batch(SharedRow(4), [BatchRequest(2, 1)])
    assert table.width == 8 and table.read(0, 2, "self") == 2 and table.read(0, 3, "self") == -1
    with pytest.raises(ReadOutOfRow) as info:
        table.read(0, 8, "self")
    assert (info.value.row, info.value.column, info.value.width) == (0, 8, 8)
    assert table.reads == 2


def test_fa3_gather_reads_past_the_row_on_the_issue_batch() -> None:
    problem = first_read_violation(SharedRow(8192), ISSUE_BATCH, sglang_fa3_gather)
    assert problem is not None
    assert problem.startswith("self-attention gather read row 0 column 8196, past the row (width 8196")
    assert first_read_violation(SharedRow(8192), ISSUE_BATCH, bounded_gather) is None
