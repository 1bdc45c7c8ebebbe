"""The read judge on recorded kernel calls (engine/sglang/kernel_calls.py), without a tree.

Each argument the judge reads is shown failing when it is off by one, and an
argument it does not know (or new keys, which it does not judge at a decode
step) is the harness's gap, never a pass.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from crossattn_sizing.engine.adapter import AdapterGap  # noqa: E402
from crossattn_sizing.engine.sglang.kernel_calls import KernelRecorder, judge_call  # noqa: E402

LENGTHS = [3, 2]
OWN = [torch.tensor([7, 8, 9]), torch.tensor([4, 5])]


def call(**changes: object) -> dict[str, object]:
    """A decode call of two requests that holds: one query each, keys 3 and 2, their own slots."""
    good: dict[str, object] = {
        "q": torch.zeros(2, 2, 4), "k_cache": torch.zeros(10, 1, 1, 4), "v_cache": torch.zeros(10, 1, 1, 4),
        "page_table": torch.tensor([[7, 8, 9, 0], [4, 5, 0, 0]], dtype=torch.int32),
        "cache_seqlens": torch.tensor([3, 2], dtype=torch.int32),
        "cu_seqlens_q": torch.tensor([0, 1, 2], dtype=torch.int32), "max_seqlen_q": 1, "softmax_scale": 0.5,
        "cu_seqlens_k_new": torch.tensor([0, 99, 7], dtype=torch.int32),  # unread without new keys
    }
    return {**good, **changes}


def test_a_call_that_reads_only_its_own_holds() -> None:
    assert judge_call(call(), "self", LENGTHS, OWN) is None


@pytest.mark.parametrize(("changes", "says"), [
    ({"cu_seqlens_q": torch.tensor([1, 2, 3], dtype=torch.int32)}, "cu_seqlens_q[0] = 1"),
    ({"cu_seqlens_q": torch.tensor([0, 1], dtype=torch.int32)}, "cu_seqlens_q of 2 entries for 2 requests"),
    ({"max_seqlen_q": 0}, "max_seqlen_q 0"),
    ({"max_seqlen_k": 2}, "max_seqlen_k 2; the longest request has 3 keys"),
    ({"cache_seqlens": torch.tensor([3, 3], dtype=torch.int32)}, "cache_seqlens 3 for request 1"),
    ({"page_table": torch.tensor([[7, 8, 9, 0], [5, 5, 0, 0]], dtype=torch.int32)},
     "page_table[1, 0] = slot 5"),
    ({"page_table": torch.tensor([[7, 8], [4, 5]], dtype=torch.int32)}, "request 0 reads 3 columns"),
    ({"cu_seqlens_q": None, "q": torch.zeros(3, 2, 4)}, "3 query rows (no cu_seqlens_q) for 2 requests"),
])  # fmt: skip
def test_each_judged_argument_fails_when_off(changes: dict[str, object], says: str) -> None:
    problem = judge_call(call(**changes), "self", LENGTHS, OWN)
    assert problem is not None and says in problem


@pytest.mark.parametrize("changes", [{"cache_batch_idx": torch.tensor([1, 0])}, {"k": torch.zeros(2, 1, 4)},
                                     {"cache_seqlens": None}])
def test_what_the_judge_cannot_read_is_the_harness_s_gap(changes: dict[str, object]) -> None:
    with pytest.raises(AdapterGap, match="flash_attn_with_kvcache"):
        judge_call(call(**changes), "cross", LENGTHS, OWN)


def test_the_recorder_keeps_copies_and_answers_the_query_s_shape() -> None:
    recorder = KernelRecorder()
    seqlens = torch.tensor([3, 2])
    out = recorder(torch.zeros(2, 2, 4), torch.zeros(10, 1, 1, 4), torch.zeros(10, 1, 1, 6),
                   cache_seqlens=seqlens)
    seqlens += 1  # the backend reusing its buffer after the call does not change what was recorded
    assert out.shape == (2, 2, 6) and recorder.calls[0]["cache_seqlens"].tolist() == [3, 2]
    with pytest.raises(AdapterGap, match="positional"):
        recorder(*([torch.zeros(1)] * 4))
