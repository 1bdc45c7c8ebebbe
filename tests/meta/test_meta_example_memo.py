"""Meta-tests: the shared run's memo of the oracle's output cannot turn a failing body green.

The attention properties compare an implementation's output with the reference's dense attention;
in verify's shared run an example's later bodies read that expected output from the memo the first
body filled (:mod:`crossattn_sizing.runs.example_memo`). Each test runs the properties' own bodies
twice on one example, as the shared run does for two policies: a wrong value in the memo must make
the property fail, and a broken implementation must fail against the memo's values exactly as it
fails against a fresh computation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import properties.impl_scenarios as scenarios
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.core.policies import BUILTIN_POLICIES
from crossattn_sizing.findings.results import NOT_RUN_MARK, PropertyFailure
from crossattn_sizing.impl import Impl, TorchImpl
from crossattn_sizing.runs import example_memo
from properties.failures import judge_against
from properties.impl_strategies import UNIT, AttentionShape, CrossCase, SelfCase
from properties.test_attention import check_cross_attention, check_self_attention
from tests.broken_impls import KeysAndValuesSwapped

MRV2, V1 = BUILTIN_POLICIES["mrv2"], BUILTIN_POLICIES["v1"]
CONFIG = RunnerConfig(
    max_model_len=48, max_num_batched_tokens=160, max_num_encoder_input_tokens=100, max_num_reqs=3,
    groups=(KVCacheGroup(GroupKind.CROSS, 16), KVCacheGroup(GroupKind.FULL, 16)),
)  # fmt: skip
COMMON = {
    "config": CONFIG, "shape": AttentionShape(2, 8, torch.float32), "content_scales": UNIT,
    "content_seed": 3, "pool_seed": 5,
}  # fmt: skip
DRAWS = {
    "cross": {**COMMON, "requests": CrossCase(rows=(2, 0), encoder_lens=(37, 11), num_queries=(2, 1))},
    "self": {**COMMON, "requests": SelfCase(rows=(1, 2), prompt_lens=(20, 9), decode=(True, False))},
}


class FixedDraws:
    """``st.data()`` answering each of a property body's draws by its label: one fixed example."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def draw(self, strategy: object, label: str) -> Any:
        return self._values[label]


def body(kind: str) -> Callable[[Impl, Any], None]:
    """The attention property's body for ``kind``, on its fixed example."""
    data: Any = FixedDraws(DRAWS[kind])
    if kind == "cross":
        return lambda impl, policy: check_cross_attention(data, impl, policy, guarded=False)
    return lambda impl, policy: check_self_attention(data, impl, policy)


def as_one_example(test: Callable[[], None]) -> None:
    """Run ``test`` as the single example of a Hypothesis test (the bodies record events)."""

    @settings(max_examples=1, database=None, deadline=None, phases=[Phase.generate])
    @given(st.none())
    def once(_: None) -> None:
        test()

    once()


@pytest.fixture
def computations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How often the reference's dense attention was computed (not read from the memo)."""
    count = [0]
    original = scenarios._dense_reference

    def counting(*args: Any) -> torch.Tensor:
        count[0] += 1
        return original(*args)

    monkeypatch.setattr(scenarios, "_dense_reference", counting)
    return count


@pytest.mark.parametrize("kind", sorted(DRAWS))
def test_a_wrong_value_in_the_memo_fails_the_property(kind: str, computations: list[int]) -> None:
    as_one_example(lambda: poisoned(body(kind), computations))


def poisoned(run: Callable[[Impl, Any], None], computations: list[int]) -> None:
    with example_memo.one_example() as memo:
        run(TorchImpl("cpu"), MRV2)  # holds, and fills the memo
        assert memo and computations[0] > 0
        filled = computations[0]
        for key, value in list(memo.items()):  # O(1) values (UNIT scales): 1.0 is far past the tolerance
            memo[key] = value + 1.0
        with pytest.raises(PropertyFailure, match="differs from dense attention"):
            run(TorchImpl("cpu"), V1)  # a correct implementation, judged against the poisoned memo
        assert computations[0] == filled  # the failure came from the memo's values, not a fresh computation


@pytest.mark.parametrize("kind", sorted(DRAWS))
def test_a_broken_implementation_fails_against_the_memo(kind: str, computations: list[int]) -> None:
    as_one_example(lambda: broken(body(kind), computations))


def broken(run: Callable[[Impl, Any], None], computations: list[int]) -> None:
    with pytest.raises(PropertyFailure, match="differs from dense attention"):
        run(KeysAndValuesSwapped("cpu"), MRV2)  # fails on this example when nothing is memoised
    with example_memo.one_example():
        run(TorchImpl("cpu"), MRV2)  # a correct implementation first: the memo holds the right answer
        filled = computations[0]
        with pytest.raises(PropertyFailure, match="differs from dense attention"):
            run(KeysAndValuesSwapped("cpu"), V1)
        assert computations[0] == filled


@pytest.mark.parametrize("kind", sorted(DRAWS))
def test_a_non_finite_oracle_is_not_run_never_holds(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A NaN expected value slips through ``err > bound`` (False for NaN): without the refusal a
    correct implementation would "hold" against a broken oracle, and a NaN from the memo or the
    reference would otherwise be judged as the implementation's."""
    real = scenarios._dense_reference

    def nan_reference(*args: Any) -> torch.Tensor:
        return torch.full_like(real(*args), math.nan)

    monkeypatch.setattr(scenarios, "_dense_reference", nan_reference)
    with pytest.raises(pytest.skip.Exception, match=re.escape(NOT_RUN_MARK) + ".*non-finite expected output"):
        as_one_example(lambda: body(kind)(TorchImpl("cpu"), MRV2))


def test_judge_against_refuses_nan_and_inf_only() -> None:
    judge_against([0.0, -1.5, 1e300], "the reference")  # finite: judged
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(pytest.skip.Exception, match="the reference gave a non-finite"):
            judge_against([1.0, bad], "the reference")
