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
from concurrent.futures import ThreadPoolExecutor

import pytest

from crossattn_sizing.engine.sglang.client import SglangReads, sglang_worker
from crossattn_sizing.findings.results import PropertyFailure
from properties import test_read_coverage
from tests.sglang_tree import FIXTURE, copy_tree

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


HANG = (ALLOCATION, (DECODE_LINE, "    import time; time.sleep(600)\n" + DECODE_LINE))
EXIT = (ALLOCATION, (DECODE_LINE, "    import os; os._exit(0)\n" + DECODE_LINE))
MUTATIONS = {
    "strip": STRIP_SHORT, "replay": REPLAY_ONE_LONGER, "narrow": NARROW_ROWS, "hang": HANG, "exit": EXIT,
}  # fmt: skip


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each tree of this module by name (the mutated copies and the recorded tree), its
    worker started: two at a time, not one per test in turn, since loading a tree's files is most of
    each test's time. A worker a test's step kills is started afresh by its next call, as ever."""
    specs = {name: f"sglang@{copy_tree(tmp_path_factory.mktemp(name) / 't', {rel: change})}"
             for name, (rel, change) in MUTATIONS.items()}  # fmt: skip
    specs["recorded"] = f"sglang@{FIXTURE}"
    with ThreadPoolExecutor(max_workers=2) as pool:  # two: each load is CPU-bound, under its own deadline
        list(pool.map(sglang_worker, specs.values()))
    return specs


def test_the_unmutated_tree_holds_on_the_small_batch(trees: dict[str, str]) -> None:
    assert SglangReads(trees["recorded"]).first_problem(64, SMALL) is None


def test_extend_stripping_one_token_short_fails(trees: dict[str, str]) -> None:
    kind, line = SglangReads(trees["strip"]).first_problem(64, SMALL)
    assert kind == "fails"
    assert "extend: request 0: decoder length (seq_lens) 4 after stripping the encoder" in line


def test_replay_kernel_one_token_longer_fails_on_replay_only(trees: dict[str, str]) -> None:
    verdicts = SglangReads(trees["replay"]).verdicts(64, SMALL)
    assert verdicts["eager"] == {"verdict": "holds"}  # the eager path does not run the Triton kernel
    assert verdicts["replay"]["verdict"] == "fails"
    assert "cache_seqlens_int32 7 for request 0, whose true length is 6" in verdicts["replay"]["message"]


def test_rows_narrower_than_admitted_fail_the_write_side(trees: dict[str, str]) -> None:
    reads = SglangReads(trees["narrow"])
    written = reads.write(2048, [(1500, 4, 5), (0, 100, 101)])
    assert written["verdict"] == "fails" and "past the release's row (width 1052" in written["message"]
    with pytest.raises(PropertyFailure, match="writes past its row"):
        test_read_coverage.test_admitted_requests_fit_their_shared_row(read_builder=reads)


# The bounded tree holding on the issue batch (context 8192, [(6404, 20, 21), (0, 3000, 3001)]) is asserted,
# to the letter, by tests/test_sglang_engine.py::test_worker_bounded_copy_holds_and_original_fails; this
# module's copy of that assertion (and the tree copy and worker load it cost) was dropped as a duplicate.


@pytest.mark.parametrize(
    ("tree", "says"), [("hang", "timed out after 5 s"), ("exit", "worker died (exit status 0)")]
)
def test_a_step_that_hangs_or_exits_fails_within_the_deadline(
    trees: dict[str, str], tree: str, says: str
) -> None:
    spec = trees[tree]
    sglang_worker(spec, deadline=5.0)  # the tree's worker, with a short deadline for this test
    verdicts = SglangReads(spec).verdicts(64, SMALL)
    assert {v["verdict"] for v in verdicts.values()} == {"fails"}
    assert says in verdicts["eager"]["message"] and "Traceback" not in verdicts["eager"]["message"]
