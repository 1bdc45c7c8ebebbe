"""Meta-tests: SGLang's start-up properties fail on a tree whose capture dummy is one column past its row.

The copy of the recorded 0.5.23 tree changes one line of the CUDA-graph
runner's ``__init__`` (line 441, same line count): each dummy request's
encoder length becomes ``context_len + 4``, the row's own width, so with its
one decoder token it reads columns ``[0, context_len + 5)``: one past the row.
Both start-up properties (capture and padded replay) fail on every server
drawn; the unmutated tree holds the same capture on a server whose context
covers the encoder fill. A copy whose FA3 capture builds the text page table
from column 0 (the encoder part) fails the capture on the judge of the
kernel's own columns.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import Phase, given, settings

from crossattn_sizing.engine.sglang.client import SglangStartup
from crossattn_sizing.engine.sglang.startup_client import StartupServer
from crossattn_sizing.findings.results import PropertyFailure
from properties import sglang_startup
from properties.sglang_startup_strategies import startup_servers
from tests.sglang_tree import FA3, REPLAY_LINE, SPEC, copy_tree

os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("torch")

RUNNER = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"
FILL = '            getattr(model_runner.model_config.hf_config, "max_source_positions", 0)\n'
ONE_PAST = "            model_runner.model_config.context_len + 4\n"


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> SglangStartup:
    """The tree whose capture dummy is one column past its row (its worker shared by the tests)."""
    tree = copy_tree(tmp_path_factory.mktemp("startup") / "one-past", {RUNNER: (FILL, ONE_PAST)})
    return SglangStartup(f"sglang@{tree}")


@pytest.mark.parametrize("path", ["capture", "replay"])
def test_a_dummy_one_past_its_row_fails(broken: SglangStartup, path: str) -> None:
    server = StartupServer(64, (1, 2), 2, None)
    with pytest.raises(PropertyFailure, match=r"dummy request is longer than its row \(.*runner\.py:440\)"
                                              r"(.|\n)*columns \[0, 69\) of its row, which has 68"):
        sglang_startup.check_startup(server, broken, path)


def test_the_unmutated_tree_holds_the_same_capture() -> None:
    sglang_startup.check_startup(StartupServer(64, (1, 2), 2, None), SglangStartup(SPEC), "capture")


def test_drawn_servers_fail_on_the_broken_tree(broken: SglangStartup) -> None:
    """The property's own strategy and body on drawn servers, without shrinking (each step is a call into
    the tree; the fixed case above shows the line caught)."""
    def body(server: StartupServer) -> None:
        sglang_startup.check_startup(server, broken, "capture")

    prop = settings(max_examples=3, phases=(Phase.explicit, Phase.generate), database=None, deadline=None)(
        given(server=startup_servers())(body))
    with pytest.raises(PropertyFailure, match="dummy request is longer than its row"):
        prop()


def test_a_capture_reading_the_encoder_part_as_text_fails(tmp_path: Path) -> None:
    """FA3's capture/replay text page table from column 0 (the encoder part) instead of each dummy's
    ``encoder_lens``: every length still fits, but the self-attention kernel is handed columns that are not
    the dummy's decoder keys; the unmutated tree holds the same capture. Run in this process (the release's
    own code all the same; a worker start per tree would double the test's time)."""
    from crossattn_sizing.engine.sglang.run import SglangRelease
    from crossattn_sizing.engine.sglang.startup import KERNEL_ARGS_WRONG, run_startup
    from tests.sglang_tree import FIXTURE

    mutated = REPLAY_LINE.replace("= encoder_lens", "= 0 * encoder_lens")
    tree = copy_tree(tmp_path / "text-at-0", {FA3: (REPLAY_LINE, mutated)})
    capture = run_startup(SglangRelease.load(tree), 64, [1, 2], 2, 16)["paths"]["capture"]
    assert capture["verdict"] == "fails" and capture["headline"] == KERNEL_ARGS_WRONG
    assert "self-attention call (flash_attn_with_kvcache) hands the kernel page_table[0, 0] = slot 1; " \
        "request 0's own" in capture["message"]
    unmutated = run_startup(SglangRelease.load(FIXTURE), 64, [1, 2], 2, 16)
    assert unmutated["paths"]["capture"] == {"verdict": "holds"}


def test_the_mutation_keeps_the_release_s_line_numbers() -> None:
    from tests.sglang_tree import FIXTURE

    lines = (FIXTURE / RUNNER).read_text().splitlines(keepends=True)
    assert lines[440] == FILL  # line 441, inside the statement at line 440
