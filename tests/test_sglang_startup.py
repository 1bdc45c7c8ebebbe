"""SGLang's start-up batches on the recorded 0.5.23 tree (tests/fixtures/sglang/0.5.23; no download).

The CUDA-graph runner's own statements give the dummy lengths (seq_lens 1 from
FA3's ``get_cuda_graph_seq_len_fill_value``, encoder_lens the config's
``max_source_positions``, lines 433 and 440 of ``decode_cuda_graph_runner.py``);
FA3's own capture buffers, capture and replay entry and ``forward_decode``
build what the kernel is handed. Anchors are hand-computed: the row is
``context_len + 4`` wide (the release's sizing), the encoder page table
``context_len`` (``init_cuda_graph_state``).
"""

from __future__ import annotations

import os
import types
from typing import Any

import pytest

from crossattn_sizing.commands.cli import main
from crossattn_sizing.engine.sglang import releases
from crossattn_sizing.engine.sglang.startup_client import StartupServer, check_line
from tests.sglang_tree import FIXTURE, SPEC

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip("torch")

RUNNER = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"
WHISPER = 1500


@pytest.fixture(scope="module")
def release() -> Any:
    from crossattn_sizing.engine.sglang.run import SglangRelease

    return SglangRelease.load(FIXTURE)


def test_judge_dummy_anchors() -> None:
    from crossattn_sizing.engine.sglang.startup import judge_dummy

    wide = {"encoder": 100, "decoder": 100}
    assert judge_dummy(99, 1, 100, wide) is None  # columns [0, 100) of a 100-wide row: the last fits
    assert "columns [0, 101) of its row, which has 100" in str(judge_dummy(100, 1, 100, wide))
    assert "encoder page table" in str(judge_dummy(97, 1, 100, {"encoder": 96, "decoder": 96}))
    assert judge_dummy(0, 1, 12, {"decoder": 8}) is None  # no encoder: only the decoder table is asked


def test_the_dummy_lengths_are_the_runner_s_own(release: Any) -> None:
    from crossattn_sizing.engine.sglang.run import backend_self
    from crossattn_sizing.engine.sglang.startup import dummy_fills, fill_lines

    step = release.range.startup.runner(FIXTURE)
    assert step.file == RUNNER
    assert fill_lines(release, step) == {"seq_len_fill_value": f"{RUNNER}:433",
                                         "encoder_len_fill_value": f"{RUNNER}:440"}
    backend = backend_self(release, None, types.SimpleNamespace(width=1), 64, 1)  # type: ignore[arg-type]
    assert dummy_fills(release, step, backend, 64, WHISPER) == (1, WHISPER)
    assert dummy_fills(release, step, backend, 64, None) == (1, 0)  # Mllama's config declares none


def test_a_context_below_the_encoder_fill_fails_capture_at_the_runner_s_line(release: Any) -> None:
    from crossattn_sizing.engine.sglang.startup import DUMMY_PAST_ROW, run_startup

    answer = run_startup(release, 1024, [1, 2], 2, WHISPER)
    capture = answer["paths"]["capture"]
    assert capture["verdict"] == "fails" and capture["headline"] == DUMMY_PAST_ROW
    assert capture["where"] == f"{RUNNER}:440"
    assert "columns [0, 1501) of its row, which has 1028" in capture["message"]  # 1024 + 4


def test_the_row_holds_the_dummy_but_the_encoder_page_table_does_not(release: Any) -> None:
    """E + d = 1501 fits a row of 1497 + 4 = 1501 columns; the capture's encoder page table has 1497."""
    from crossattn_sizing.engine.sglang.startup import run_startup

    capture = run_startup(release, 1497, [1], 1, WHISPER)["paths"]["capture"]
    assert capture["verdict"] == "fails" and "(1497 columns, init_cuda_graph_state)" in capture["message"]


def test_capture_holds_where_the_context_covers_the_encoder_fill(release: Any) -> None:
    """Capture's lengths come from seq_lens.cpu() (1 key each): it holds; replay reads max_context_len keys
    past the encoder part (the read side's known overflow, FA3 line 3387), past row 0."""
    from crossattn_sizing.engine.sglang.startup import READ_PAST_ROW, run_startup

    answer = run_startup(release, 2048, [1, 2], 2, WHISPER)
    assert answer["paths"]["capture"] == {"verdict": "holds"}
    assert answer["fills"] == {"seq_len_fill_value": 1, "encoder_len_fill_value": WHISPER}
    replay = answer["paths"]["replay"]
    assert replay["verdict"] == "fails" and replay["headline"] == READ_PAST_ROW
    assert replay["where"] == "sglang/srt/layers/attention/flashattention_backend.py:3387"
    assert (replay["column"], replay["width"]) == (2052, 2052)


def test_without_an_encoder_fill_both_paths_hold(release: Any) -> None:
    from crossattn_sizing.engine.sglang.startup import run_startup

    answer = run_startup(release, 64, [1, 3], 3, None)
    assert answer["paths"] == {"capture": {"verdict": "holds"}, "replay": {"verdict": "holds"}}


def test_the_oldest_range_is_not_run_naming_why() -> None:
    from crossattn_sizing.engine.sglang.startup import run_startup

    oldest = types.SimpleNamespace(range=releases.RANGES[-1])
    answer = run_startup(oldest, 64, [1], 1, None)  # type: ignore[arg-type]
    assert {v["verdict"] for v in answer["paths"].values()} == {"not run"}
    assert "init_forward_metadata_capture_cuda_graph" in answer["paths"]["capture"]["reason"]


def test_every_range_from_0_5_13_runs_the_start_up_steps() -> None:
    runs = [r for r in releases.RANGES if isinstance(r.startup, releases.StartupStep)]
    assert [r.first for r in runs] == ["0.5.22", "0.5.18", "0.5.16", "0.5.13"]
    assert releases.RANGES[-1].last == "0.5.12.post1" and isinstance(releases.RANGES[-1].startup, str)


def test_check_replays_one_start_up_server(capsys: pytest.CaptureFixture[str]) -> None:
    """The replay line of a server, run (through the client and the tree's worker): the same verdict."""
    server = StartupServer(1024, (1, 2), 2, WHISPER)
    line = check_line(SPEC, server)
    assert line.endswith("--context-len 1024 --max-running-requests 2 --cuda-graph-bs 1,2 "
                         "--max-source-positions 1500")
    assert main(line.split()[1:]) == 1
    out = capsys.readouterr().out
    headline = "a start-up (CUDA-graph) dummy request is longer than its row"
    assert f"FAIL  capture: {headline} ({RUNNER}:440)" in out
    assert f"reproduce: {line}" in out
    assert main(["check", "--engine", SPEC, "--context-len", "64", "--cuda-graph-bs", "1,2"]) == 0
