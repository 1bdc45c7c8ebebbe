"""Meta-tests: the SGLang read and write judges fail on mutated copies of the recorded 0.5.23 tree.

Each copy changes one line of the release's own code (tests/sglang_tree.py);
the judges run that code as they run a release's (engine/sglang/run.py). The
two read-side mutations are the held-out misses of issue 36: both corrupt
attention on a GPU without reading past a row, so only the lengths the
backend's metadata hands the kernel, and the release's extend output fed into
its own decode, catch them. The judge reads the arguments ``forward_decode``
passes the attention kernel (engine/sglang/kernel_calls.py): each argument it
newly judges has a mutation here that shifts it by one (the query offsets,
the query length), and a mutation of a length the call does not pass
(``cu_seqlens_k``) holds. A tree whose step hangs or ends its process fails
that batch within the deadline, in one line.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from crossattn_sizing.core.admission_rules import EngineRequest, SglangAdmission
from crossattn_sizing.core.layouts import SharedRow
from crossattn_sizing.core.read_gather import BatchRequest
from crossattn_sizing.engine.sglang.client import SglangReads, sglang_worker
from crossattn_sizing.findings.results import PropertyFailure
from properties import test_read_coverage
from properties.read_strategies import ReadCase
from tests.sglang_tree import FA3, FIXTURE, copy_tree

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
# The prefix length handed on one token longer where the encoder is cached (the extend's else branch, which
# a text-only request also takes): an encoder request reaches it only with a cached prefix.
PREFIX_STRIP_SHORT = (SCHEDULE_BATCH, ("                prefix_lens[i] -= encoder_len\n",
                                       "                prefix_lens[i] -= encoder_len - 1\n"))
NARROW_ROWS = (SIZING, ("    extra = 4 + (max_speculative_num_draft_tokens() or 0)\n",
                        "    extra = 4 - 1000 + (max_speculative_num_draft_tokens() or 0)\n"))
DECODE_LINE = "    batch.maybe_evict_swa()\n"

NORMAL_DECODE = ("                # Normal Decode\n"
                 "                metadata.cache_seqlens_int32 = seqlens_in_batch.to(torch.int32)\n"
                 "                metadata.max_seq_len_k = eager_max_k\n"
                 "                metadata.cu_seqlens_q = torch.arange(\n")
QUERY_OFFSETS = "                    0, batch_size + 1, dtype=torch.int32, device=device\n"
# The eager decode's query offsets one row late: each query and output one row on, the last past q.
SHIFTED = QUERY_OFFSETS.replace("0, batch_size + 1", "1, batch_size + 2")
QUERY_OFFSETS_SHIFTED = (FA3, (NORMAL_DECODE + QUERY_OFFSETS, NORMAL_DECODE + SHIFTED))
# Every decode's query length 0 (the metadata's default, on both paths): the kernel computes no query row.
NO_QUERY_ROWS = (FA3, ("    max_seq_len_q: int = 1\n", "    max_seq_len_q: int = 0\n"))
KEY_OFFSETS = ("                metadata.cu_seqlens_k = torch.nn.functional.pad(\n"
               "                    torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0)\n"
               "                )\n                metadata.page_table = self.req_to_token_pool")
# The eager decode's cu_seqlens_k one longer from request 0 on: the decode call never passes it.
KEY_OFFSETS_UNREAD = (FA3, (KEY_OFFSETS, KEY_OFFSETS.replace("int32), (1, 0)", "int32) + 1, (1, 0)")))


HANG = (ALLOCATION, (DECODE_LINE, "    import time; time.sleep(600)\n" + DECODE_LINE))
EXIT = (ALLOCATION, (DECODE_LINE, "    import os; os._exit(0)\n" + DECODE_LINE))
MUTATIONS = {
    "strip": STRIP_SHORT, "replay": REPLAY_ONE_LONGER, "narrow": NARROW_ROWS, "hang": HANG, "exit": EXIT,
    "prefix-strip": PREFIX_STRIP_SHORT, "query-offsets": QUERY_OFFSETS_SHIFTED,
    "no-query-rows": NO_QUERY_ROWS, "key-offsets": KEY_OFFSETS_UNREAD,
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


def small_case() -> ReadCase:
    """:data:`SMALL` as the read property's case (a server of context 64 the harness's model admits)."""
    rule = SglangAdmission(64, 64)
    requests = tuple(EngineRequest(e, p, d - p) for e, p, d in SMALL)
    return ReadCase(SharedRow(64), rule, requests, tuple(BatchRequest(e, d) for e, _p, d in SMALL))


def test_extend_stripping_one_token_short_fails(trees: dict[str, str]) -> None:
    kind, line = SglangReads(trees["strip"]).first_problem(64, SMALL)
    assert kind == "fails"
    assert "extend: request 0: decoder length (seq_lens) 4 after stripping the encoder" in line


def test_a_cached_prefix_stripped_wrong_fails_only_with_a_prefix(trees: dict[str, str]) -> None:
    """The extend's cached-prefix branch, which the read draws now reach: an encoder request with no prefix
    holds, the same request with its encoder and 2 prompt tokens cached fails on both sides, headed by the
    extend (prefix_lens is newly judged)."""
    reads = SglangReads(trees["prefix-strip"])
    assert reads.first_problem(64, [(5, 3, 6)]) is None
    cached = [(5, 3, 6, 7)]
    kind, line = reads.first_problem(64, cached)
    assert kind == "fails" and "prefix_lens 3 after stripping the encoder" in line
    assert "the request has 2 of its prompt tokens cached" in line
    written = reads.write(64, cached)
    assert written["verdict"] == "fails" and written["headline"].startswith("the release's extend")


def test_a_failing_extend_is_headed_by_its_step_on_both_sides(trees: dict[str, str]) -> None:
    """The extend's mismatch fails the write side too (never folded into "holds"), and each side's
    headline names the extend, not a column past a row (none left it)."""
    reads = SglangReads(trees["strip"])
    written = reads.write(64, SMALL)
    assert written["verdict"] == "fails" and "prepare_encoder_info_extend" in written["headline"]
    assert "decoder length (seq_lens) 4" in written["message"]
    headline, line = test_read_coverage._problem(reads, small_case())
    assert "extend" in headline and "outside the request's row" not in headline and "seq_lens) 4" in line
    with pytest.raises(PropertyFailure, match="write-side coverage: the release's extend") as caught:
        test_read_coverage.judge_tree_write(reads, small_case())
    assert "writes past its row" not in str(caught.value)


@pytest.mark.parametrize("path", ["eager", "replay"])
def test_the_unmutated_tree_holds_on_the_small_case_on_each_path(trees: dict[str, str], path: str) -> None:
    """The known verdict of the recorded tree on the batch every kernel-argument mutation fails."""
    assert SglangReads(trees["recorded"]).verdicts(64, SMALL)[path] == {"verdict": "holds"}


def test_query_offsets_shifted_by_one_fail_on_eager(trees: dict[str, str]) -> None:
    """cu_seqlens_q, newly judged: the eager decode's offsets one row late fail; replay (whose offsets the
    capture buffers hold) still holds."""
    verdicts = SglangReads(trees["query-offsets"]).verdicts(64, SMALL)
    assert verdicts["replay"] == {"verdict": "holds"}
    assert verdicts["eager"]["verdict"] == "fails"
    assert "cu_seqlens_q[0] = 1" in verdicts["eager"]["message"]
    assert verdicts["eager"]["headline"].startswith("the attention call hands the kernel")
    headline, _line = test_read_coverage._problem(SglangReads(trees["query-offsets"]), small_case())
    assert "outside the request's row" not in headline


def test_no_query_rows_fail_on_both_paths(trees: dict[str, str]) -> None:
    """max_seqlen_q, newly judged: a decode whose query length is 0 computes nothing; both paths fail."""
    verdicts = SglangReads(trees["no-query-rows"]).verdicts(64, SMALL)
    for path in ("eager", "replay"):
        assert verdicts[path]["verdict"] == "fails", path
        assert "max_seqlen_q 0" in verdicts[path]["message"]


def test_a_length_the_call_does_not_pass_is_not_judged(trees: dict[str, str]) -> None:
    """cu_seqlens_k is built by the eager decode but never passed to the kernel: changing it holds."""
    assert SglangReads(trees["key-offsets"]).first_problem(64, SMALL) is None


def test_replay_kernel_one_token_longer_fails_on_replay_only(trees: dict[str, str]) -> None:
    verdicts = SglangReads(trees["replay"]).verdicts(64, SMALL)
    assert verdicts["eager"] == {"verdict": "holds"}  # the eager path does not run the Triton kernel
    assert verdicts["replay"]["verdict"] == "fails"
    assert "cache_seqlens 7 for request 0, whose true length is 6" in verdicts["replay"]["message"]


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
