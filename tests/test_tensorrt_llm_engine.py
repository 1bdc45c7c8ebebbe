"""TensorRT-LLM's own cross-pool sizing, executed from the recorded trees (tests/fixtures/tensorrt_llm/).

The recorded commit sizes Whisper-large-v3's cross pool at 1024 (max_input_len)
for 1500 encoder frames; the tree with the fix's shape gives 1500. The function
runs in its worker, under its file's name and line numbers; what it cannot be
asked about is "not run" naming why, never a verdict.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from crossattn_sizing.core.cross_pool import FAMILIES, CrossPoolCase, CrossPoolNotRun, whisper_large_v3_case
from crossattn_sizing.engine.tensorrt_llm.sizer import TrtllmCrossPool
from crossattn_sizing.engine.tensorrt_llm.source import read_layout_source
from crossattn_sizing.findings.results import PropertyFailure
from properties.cross_pool_capacity import encoder_tokens_fit_the_cross_pool
from tests.tensorrt_llm_tree import FIXED, RECORDED, changed_copy, spec

ROOT = Path(__file__).resolve().parents[1]
FALLBACK_LINE = "        max_seq_len = fallback_max_seq_len or self._max_seq_len\n"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``crossattn-sizing ARGS`` in a fresh process, from the repository root."""
    return subprocess.run([sys.executable, "-m", "crossattn_sizing", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, **(env or {})}, timeout=300, check=False)  # fmt: skip


def test_the_recorded_function_keeps_the_commits_line_numbers() -> None:
    source = read_layout_source(RECORDED)
    assert source.function_line == 1894 and source.signature_problem is None
    assert source.path.read_text().startswith("# Copyright (c) 2026, NVIDIA CORPORATION.")


def test_recorded_tree_sizes_whisper_large_v3_at_max_input_len() -> None:
    assert TrtllmCrossPool(spec(RECORDED)).layout(whisper_large_v3_case()) == (32, 20, 64, 1024)


def test_fixed_tree_sizes_it_at_the_encoder_limit() -> None:
    assert TrtllmCrossPool(spec(FIXED)).layout(whisper_large_v3_case()) == (32, 20, 64, 1500)


def test_recorded_tree_reads_the_six_keys_and_min() -> None:
    bart = FAMILIES["bart-large"]
    case = CrossPoolCase("bart-large", bart.config(), 900, 4096, 2048)
    assert TrtllmCrossPool(spec(RECORDED)).pool_len(case) == 1024  # min(2048, max_position_embeddings)
    t5 = FAMILIES["t5-small"]
    case = CrossPoolCase("t5-small", t5.config(()), 900, 4096, None)
    assert TrtllmCrossPool(spec(RECORDED)).pool_len(case) == 4096  # no limit, no max_input_len: max_seq_len


def test_property_fails_on_the_recorded_tree_with_whisper_large_v3() -> None:
    with pytest.raises(PropertyFailure) as info:
        encoder_tokens_fit_the_cross_pool(sizer=TrtllmCrossPool(spec(RECORDED)))
    text = info.value.diagnosis
    assert "model family:   whisper-large-v3 (config limit keys: max_source_positions=1500)" in text
    assert "encoder tokens: 1500 (audio frames, fixed)" in text
    assert "max_input_len 1024" in text and "cross pool:     1024 tokens" in text
    assert info.value.reproduce.startswith(f"crossattn-sizing check --engine {spec(RECORDED)} --config ")


def test_property_holds_on_the_fixed_tree() -> None:
    encoder_tokens_fit_the_cross_pool(sizer=TrtllmCrossPool(spec(FIXED)))


def test_the_check_line_replays_the_failure() -> None:
    with pytest.raises(PropertyFailure) as info:
        encoder_tokens_fit_the_cross_pool(sizer=TrtllmCrossPool(spec(RECORDED)))
    words = shlex.split(info.value.reproduce)
    assert words[:2] == ["crossattn-sizing", "check"]
    done = cli(*words[1:])
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "FAIL  the request's encoder tokens need 1500 tokens of the cross pool, which holds 1024"
        in done.stdout
    )
    assert f"reproduce: {info.value.reproduce}" in done.stdout  # the same line again


def test_verify_fails_on_the_recorded_tree_and_holds_on_the_fixed_one() -> None:
    done = cli("verify", "--engine", spec(RECORDED))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cross-pool capacity: admitted encoder tokens fit the pool  fails" in done.stdout
    assert (
        "model family:   whisper-large-v3" in done.stdout and "check: crossattn-sizing check" in done.stdout
    )
    check = next(line for line in done.stdout.splitlines() if "check: crossattn-sizing" in line)
    replay = cli(*shlex.split(check.split("check: ", 1)[1])[1:])
    assert replay.returncode == 1 and "which holds 1024" in replay.stdout
    done = cli("verify", "--engine", spec(FIXED), "--max-examples", "100")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cross-pool capacity: admitted encoder tokens fit the pool  holds" in done.stdout


def test_reproduce_whisper_on_both_trees() -> None:
    done = cli("reproduce", "whisper", "--engine", spec(RECORDED))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "encoder tokens: 1500" in done.stdout and "cross pool:     1024 tokens" in done.stdout
    done = cli("reproduce", "whisper", "--engine", spec(FIXED))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK    1500 encoder tokens fit the cross pool of 1500 tokens" in done.stdout


def test_a_changed_signature_is_not_run(tmp_path: Path) -> None:
    tree = changed_copy(
        RECORDED,
        tmp_path / "sig",
        "        fallback_max_seq_len: Optional[int] = None\n",
        "        fallback_max_seq_len: Optional[int] = None, *, encoder_len: int\n",
    )
    with pytest.raises(
        CrossPoolNotRun, match=r"_util.py:1894: .* is not \(self, fallback_max_seq_len=None\)"
    ):
        TrtllmCrossPool(spec(tree)).pool_len(whisper_large_v3_case())
    with pytest.raises(pytest.skip.Exception, match="not run"):
        encoder_tokens_fit_the_cross_pool(sizer=TrtllmCrossPool(spec(tree)))
    done = cli("reproduce", "whisper", "--engine", spec(tree))
    assert done.returncode == 3 and "NOT RUN" in done.stdout, done.stdout + done.stderr
    done = cli("verify", "--engine", spec(tree))
    assert done.returncode == 3 and "  not run  " in done.stdout, done.stdout + done.stderr


def test_an_imported_name_used_is_not_run_naming_it(tmp_path: Path) -> None:
    tree = changed_copy(
        RECORDED,
        tmp_path / "torch",
        FALLBACK_LINE,
        "        max_seq_len = torch.tensor(fallback_max_seq_len or self._max_seq_len)\n",
    )
    with pytest.raises(CrossPoolNotRun, match=r"_util.py:1942: .*StandInUsed: the sizing used torch.tensor"):
        TrtllmCrossPool(spec(tree)).pool_len(whisper_large_v3_case())


def test_a_sizing_that_never_returns_is_not_run_after_the_deadline(tmp_path: Path) -> None:
    tree = changed_copy(RECORDED, tmp_path / "hang", FALLBACK_LINE, "        while True: pass\n")
    done = cli("reproduce", "whisper", "--engine", spec(tree), env={"CROSSATTN_CALL_TIMEOUT": "2"})
    assert done.returncode == 3, done.stdout + done.stderr
    assert "NOT RUN" in done.stdout and "timed out after 2 s" in done.stdout


def test_the_kept_worker_takes_each_callers_deadline() -> None:
    """One worker per tree (engine/client.kept_worker, as SGLang's): a later ``--call-timeout`` bounds its
    calls too, instead of the one it was started with."""
    from crossattn_sizing.engine.tensorrt_llm.sizer import tensorrt_llm_worker

    first = tensorrt_llm_worker(spec(RECORDED), 170.0)
    again = tensorrt_llm_worker(f" {spec(RECORDED)} ", 190.0)
    assert again is first and first.deadline == 190.0
    assert tensorrt_llm_worker(spec(RECORDED)).deadline == 190.0  # none given: the worker keeps its own
    assert TrtllmCrossPool(spec(RECORDED)).pool_len(whisper_large_v3_case()) == 1024
