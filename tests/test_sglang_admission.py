"""SGLang's admission as the tree's own code decides it (engine/sglang/admission.py; no download).

On the recorded 0.5.23 tree: its ``TpModelWorker.get_worker_info`` gives the
limits, its ``validate_input_length`` refuses, its ``init_req_max_new_tokens``
(with the allocator's ``max_new_tokens_for_memory``) caps the output. A
release that computes its limits in ``TpModelWorker.__init__`` (0.5.13.post1
and older) has those statements run alone. Every real release's admission runs
in ``nox -s engine`` (tests/test_sglang_real.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crossattn_sizing.commands.cli import main
from crossattn_sizing.core.admission_rules import EngineRequest, SglangAdmission
from crossattn_sizing.engine.sglang.admission import load, run_admission
from crossattn_sizing.engine.sglang.client import OwnAdmission, SglangReads
from crossattn_sizing.engine.sglang.releases import RANGES, range_for
from tests.sglang_tree import FIXTURE, SPEC, copy_tree

os.environ.setdefault("TRITON_INTERPRET", "1")

TP_WORKER = "sglang/srt/managers/tp_worker.py"


@pytest.mark.parametrize(("context_len", "kv_capacity"),
                         [(2048, 4096), (2048, 1000), (64, 64), (8192, 10**6)])
def test_the_recorded_release_s_limits_are_the_model_s(context_len: int, kv_capacity: int) -> None:
    rule = SglangReads(SPEC).admission(context_len, kv_capacity)
    model = SglangAdmission(context_len, kv_capacity)
    assert isinstance(rule, OwnAdmission)
    assert (rule.max_req_len, rule.max_req_input_len) == (model.max_req_len, model.max_req_input_len)
    assert rule.row_width == context_len + 4


def test_the_tree_refuses_and_caps_with_its_own_code() -> None:
    rule = SglangReads(SPEC).admission(2048, 4096)
    assert isinstance(rule, OwnAdmission)
    refused = rule.refusal(EngineRequest(1500, 542))  # input 2042 == max_req_input_len
    assert refused is not None
    assert "Input length (2042 tokens) exceeds the maximum allowed length (2042" in refused
    assert rule.refusal(EngineRequest(1500, 541)) is None
    assert rule.output_cap(EngineRequest(1500, 400, 10**6)) == 2047 - 1900 - 1  # max_req_len - input - 1
    assert rule.output_cap(EngineRequest(0, 100, 5)) == 5


def test_the_pool_budget_is_the_allocator_s_own() -> None:
    """A pool smaller than the context: the allocator's own budget (capacity - input - page - 1) runs
    beside ``max_req_len - input - 1`` (at page size 1 they agree)."""
    rng, _ = range_for(FIXTURE)
    assert load(FIXTURE, rng).pool_budget is not None
    answer = run_admission(FIXTURE, rng, [], 8192, 1000, [(0, 900, 10**6)])
    assert answer["verdict"] == "holds" and answer["max_req_len"] == 999
    assert answer["requests"] == [{"refused": None, "cap": min(999 - 900 - 1, 1000 - 900 - 1 - 1)}]


def test_limits_set_in_init_run_alone(tmp_path: Path) -> None:
    """0.5.13.post1 and older compute the limits in ``TpModelWorker.__init__``: only the two statements
    that set them run (the rest of ``__init__`` would reach a stand-in), then ``get_worker_info``."""
    tree = copy_tree(tmp_path / "t")
    (tree / TP_WORKER).write_text(
        "class TpModelWorker:\n"
        "    def __init__(self, server_args):\n"
        "        self.world_group = get_world_group()\n"
        "        self.max_req_len = min(\n"
        "            self.model_config.context_len - 1,\n"
        "            self.model_runner.max_token_pool_size - 1,\n"
        "        )\n"
        "        self.max_req_input_len = self.max_req_len - 5\n"
        "\n"
        "    def get_worker_info(self):\n"
        "        return (0, 0, 0, 0, self.max_req_len, self.max_req_input_len, 0, 'cpu', None, 0, 0, 0)\n"
    )
    admission = load(tree, RANGES[0])
    assert admission.limits_init is not None
    assert admission.limits(2048, 1500) == (1499, 1494)


@pytest.mark.parametrize(
    ("old", "new", "piece", "where"),
    [
        ("    def get_worker_info(self):\n", "    def get_worker_info_v2(self):\n",
         "TpModelWorker.get_worker_info", f"{TP_WORKER}:"),
        ("def validate_input_length(\n", "def validate_input_len(\n",
         "validate_input_length", "sglang/srt/managers/utils.py"),
    ],
)
def test_a_renamed_admission_step_is_not_run_naming_it(tmp_path: Path, old: str, new: str, piece: str,
                                                        where: str) -> None:
    rel = TP_WORKER if "worker_info" in old else "sglang/srt/managers/utils.py"
    spec = f"sglang@{copy_tree(tmp_path / 't', {rel: (old, new)})}"
    verdict = SglangReads(spec).admission(2048, 4096)
    assert isinstance(verdict, dict) and verdict["verdict"] == "not run"
    assert verdict["piece"] == piece and verdict["where"].startswith(where)
    assert piece in verdict["reason"] and "not a verdict on the release" in verdict["reason"]


def test_check_says_when_the_model_stands_in_for_the_tree_s_rule(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    tree = copy_tree(tmp_path / "t", {TP_WORKER: ("    def get_worker_info(self):\n",
                                                  "    def get_worker_info_v2(self):\n")})
    code = main(["check", "--engine", f"sglang@{tree}", "--context-len", "64", "--kv-capacity", "64",
                 "--requests", "5:3:6"])
    out = capsys.readouterr().out
    assert code == 3  # the reads held, but the admission did not run: never "holds"
    assert "NOT RUN admission" in out and "TpModelWorker.get_worker_info" in out
    assert "(the harness's model)" in out and "OK    eager" in out


def test_check_refuses_what_the_tree_refuses(capsys) -> None:  # type: ignore[no-untyped-def]
    code = main(["check", "--engine", SPEC, "--context-len", "64", "--kv-capacity", "64",
                 "--requests", "50:8:9"])
    assert code == 2
    assert "not admitted by SGLang: Input length (58 tokens) exceeds the maximum allowed length (58" in (
        capsys.readouterr().err)
