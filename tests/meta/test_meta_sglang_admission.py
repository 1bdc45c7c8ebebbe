"""Meta-tests: the SGLang write side judges what the tree's own rule admits, on its own rows.

The write-side property (properties/test_read_coverage.py) draws each batch
from the tree's own admission (its scheduler's limits, input check and output
cap) and lays it into the tree's own rows. A copy of the recorded 0.5.23 tree
whose limit is loosened by one line (``max_req_len`` from ``context_len + 20``
instead of ``context_len - 1``) admits requests longer than its row: the write
side fails. So does a copy whose output cap measures the request's input by
``origin_input_ids_unpadded`` (the prompt before the encoder tokens are
expanded in; one line of ``init_req_max_new_tokens``): it lets a request with
encoder input run as if the encoder took none of its row, which the stand-in
request, holding the unpadded ids a server holds, shows. The unmodified tree
holds. A tree whose admission step is renamed
leaves the write side "not run", naming the piece and its file and line, while
its read side still runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crossattn_sizing.core.admission_rules import EngineRequest
from crossattn_sizing.engine.sglang.client import OwnAdmission, SglangReads
from crossattn_sizing.findings.results import NOT_RUN_MARK, PropertyFailure
from properties import test_read_coverage
from tests.sglang_tree import SPEC, copy_tree

pytest.importorskip("transformers", reason="the 'hf' extra is not installed")
os.environ.setdefault("TRITON_INTERPRET", "1")

TP_WORKER = "sglang/srt/managers/tp_worker.py"
LIMIT = "            self.model_config.context_len - 1,\n            kv_capacity - 1,\n"
LOOSENED = (TP_WORKER, (LIMIT, LIMIT.replace("context_len - 1", "context_len + 20")))
SCHEDULER = "sglang/srt/managers/scheduler.py"
INPUT_LEN = "        input_len = len(req.origin_input_ids)\n"
UNPADDED_CAP = (SCHEDULER, (INPUT_LEN, INPUT_LEN.replace("origin_input_ids", "origin_input_ids_unpadded")))
RENAMED = (TP_WORKER, ("    def get_worker_info(self):\n", "    def get_worker_info_v2(self):\n"))


def _tree(tmp_path: Path, change: tuple[str, tuple[str, str]]) -> str:
    return f"sglang@{copy_tree(tmp_path / 't', {change[0]: change[1]})}"


def test_a_loosened_admission_limit_fails_the_write_side(tmp_path: Path) -> None:
    reads = SglangReads(_tree(tmp_path, LOOSENED))
    rule = reads.admission(2048, 4096)
    assert isinstance(rule, OwnAdmission)
    assert rule.max_req_input_len == 2048 + 20 - 5  # the tree's, not the model's 2042
    with pytest.raises(PropertyFailure, match="writes past its row") as caught:
        test_read_coverage.test_admitted_requests_fit_their_shared_row(read_builder=reads)
    assert "from its own sizing" in str(caught.value) and "check --engine sglang@" in caught.value.reproduce


def test_an_output_cap_of_the_unpadded_input_fails_the_write_side(tmp_path: Path) -> None:
    reads = SglangReads(_tree(tmp_path, UNPADDED_CAP))
    rule = reads.admission(2048, 4096)
    assert isinstance(rule, OwnAdmission)
    assert rule.output_cap(EngineRequest(1500, 400, 10**6)) == 2047 - 400 - 1  # the encoder not counted
    with pytest.raises(PropertyFailure, match="writes past its row") as caught:
        test_read_coverage.test_admitted_requests_fit_their_shared_row(read_builder=reads)
    assert "check --engine sglang@" in caught.value.reproduce


def test_the_recorded_tree_holds_the_write_side() -> None:
    test_read_coverage.test_admitted_requests_fit_their_shared_row(read_builder=SglangReads(SPEC))


def test_a_renamed_admission_step_is_not_run_naming_it(tmp_path: Path) -> None:
    reads = SglangReads(_tree(tmp_path, RENAMED))
    with pytest.raises(pytest.skip.Exception) as skipped:
        test_read_coverage.test_admitted_requests_fit_their_shared_row(read_builder=reads)
    message = str(skipped.value)
    assert message.startswith(NOT_RUN_MARK) and "write side not run" in message  # "not run", never n/a
    assert "TpModelWorker.get_worker_info" in message
    assert f"at {TP_WORKER}:" in message  # the class's file and line in the tree
    assert reads.first_problem(64, [(5, 3, 6), (0, 7, 9)]) is None  # the read side still runs and holds
