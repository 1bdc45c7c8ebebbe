"""Meta-tests: the SGLang read and write judges fail on mutated copies of the recorded 0.5.23 tree.

Each copy changes one line of the release's own code (tests/sglang_tree.py);
the judges run that code as they run a release's (engine/sglang/run.py). The
two read-side mutations are the held-out misses of issue 36: both corrupt
attention on a GPU without reading past a row, so only the lengths the
backend's metadata hands the kernel, and the release's extend output fed into
its own decode, catch them. A tree whose step hangs or ends its process
fails that batch within the deadline, in one line.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crossattn_sizing.engine.sglang.client import SglangReads, sglang_worker
from crossattn_sizing.findings.results import PropertyFailure
from properties import test_read_coverage
from tests.sglang_tree import FIXTURE, bounded_copy, copy_tree

pytest.importorskip("transformers", reason="the 'hf' extra is not installed")
os.environ.setdefault("TRITON_INTERPRET", "1")

SCHEDULE_BATCH = "sglang/srt/managers/schedule_batch.py"
KERNEL = "sglang/kernels/ops/attention/metadata.py"
SIZING = "sglang/srt/mem_cache/allocation_sizing.py"
ALLOCATION = "sglang/srt/mem_cache/allocation.py"
SMALL = [(5, 3, 6), (0, 7, 9)]  # fits its rows on every release: only a mutation makes it fail

STRIP_SHORT = (SCHEDULE_BATCH, ("            seq_lens[i] -= encoder_len\n",
                                "            seq_lens[i] -= encoder_len - 1\n"))
REPLAY_ONE_LONGER = (KERNEL, ("            val = (seq + SEQ_LEN_DELTA).to(tl.int32)\n",
                              "            val = (seq + SEQ_LEN_DELTA + 1).to(tl.int32)\n"))
NARROW_ROWS = (SIZING, ("    extra = 4 + (max_speculative_num_draft_tokens() or 0)\n",
                        "    extra = 4 - 1000 + (max_speculative_num_draft_tokens() or 0)\n"))
DECODE_LINE = "    batch.maybe_evict_swa()\n"


def _tree(tmp_path: Path, change: tuple[str, tuple[str, str]]) -> str:
    return f"sglang@{copy_tree(tmp_path / 't', {change[0]: change[1]})}"


def test_the_unmutated_tree_holds_on_the_small_batch() -> None:
    assert SglangReads(f"sglang@{FIXTURE}").first_problem(64, SMALL) is None


def test_extend_stripping_one_token_short_fails(tmp_path: Path) -> None:
    kind, line = SglangReads(_tree(tmp_path, STRIP_SHORT)).first_problem(64, SMALL)
    assert kind == "fails"
    assert "extend: request 0: decoder length (seq_lens) 4 after stripping the encoder" in line


def test_replay_kernel_one_token_longer_fails_on_replay_only(tmp_path: Path) -> None:
    verdicts = SglangReads(_tree(tmp_path, REPLAY_ONE_LONGER)).verdicts(64, SMALL)
    assert verdicts["eager"] == {"verdict": "holds"}  # the eager path does not run the Triton kernel
    assert verdicts["replay"]["verdict"] == "fails"
    assert "cache_seqlens_int32 7 for request 0, whose true length is 6" in verdicts["replay"]["message"]


def test_rows_narrower_than_admitted_fail_the_write_side(tmp_path: Path) -> None:
    reads = SglangReads(_tree(tmp_path, NARROW_ROWS))
    written = reads.write(2048, [(1500, 4, 5), (0, 100, 101)])
    assert written["verdict"] == "fails" and "past the release's row (width 1052" in written["message"]
    with pytest.raises(PropertyFailure, match="writes past its row"):
        test_read_coverage.test_admitted_requests_fit_their_shared_row(read_builder=reads)


def test_the_bounded_tree_holds_on_the_issue_batch(tmp_path: Path) -> None:
    bounded = f"sglang@{bounded_copy(tmp_path / 'b')}"
    assert SglangReads(bounded).first_problem(8192, [(6404, 20, 21), (0, 3000, 3001)]) is None


@pytest.mark.parametrize(
    ("body", "says"),
    [("    import time; time.sleep(600)\n", "timed out after 5 s"),
     ("    import os; os._exit(0)\n", "worker died (exit status 0)")],
)
def test_a_step_that_hangs_or_exits_fails_within_the_deadline(tmp_path: Path, body: str, says: str) -> None:
    spec = _tree(tmp_path, (ALLOCATION, (DECODE_LINE, body + DECODE_LINE)))
    sglang_worker(spec, deadline=5.0)  # the tree's worker, with a short deadline for this test
    verdicts = SglangReads(spec).verdicts(64, SMALL)
    assert {v["verdict"] for v in verdicts.values()} == {"fails"}
    assert says in verdicts["eager"]["message"] and "Traceback" not in verdicts["eager"]["message"]
