"""The shared run's example memo: the oracle's expected output is computed once per example for all
policies, and never reaches another example.

In verify's shared run a property's body runs again for every policy whose widths differ on the same
drawn example. The reference's dense attention (properties/impl_scenarios.py) depends on the
example's contents alone, so the first body computes it and the others read it
(:mod:`crossattn_sizing.runs.example_memo`). These tests count the reference's computations through
the shared run's own wrapper, over the attention properties' own bodies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import properties.impl_scenarios as scenarios
from crossattn_sizing.core.policies import BUILTIN_POLICIES, Policy
from crossattn_sizing.impl import TorchImpl
from crossattn_sizing.runs import example_memo
from crossattn_sizing.runs.shared_run import SharedPolicies
from properties.test_attention import check_cross_attention, check_self_attention

MRV2, V1 = BUILTIN_POLICIES["mrv2"], BUILTIN_POLICIES["v1"]


def test_outside_an_example_nothing_is_kept() -> None:
    computed: list[int] = []

    def compute() -> int:
        computed.append(1)
        return len(computed)

    def key() -> str:
        raise AssertionError("a policy's own run builds no key")

    assert example_memo.memoised(key, compute) == 1
    assert example_memo.memoised(key, compute) == 2  # computed again: a policy's own run keeps nothing
    assert example_memo.current() is None


def test_one_example_computes_a_key_once_and_drops_it_when_judged() -> None:
    computed: list[str] = []

    def ask(key: str) -> str:
        return example_memo.memoised(lambda: key, lambda: computed.append(key) or key)

    with example_memo.one_example() as memo:
        assert [ask(k) for k in ("a", "b", "a", "b")] == ["a", "b", "a", "b"]
        assert computed == ["a", "b"] and example_memo.current() is memo
    assert example_memo.current() is None and not memo
    with pytest.raises(RuntimeError), example_memo.one_example() as memo:  # a failing body: dropped too
        ask("a")
        raise RuntimeError("the body failed")
    assert example_memo.current() is None and not memo
    with example_memo.one_example():  # the next example computes its own
        ask("a")
    assert computed == ["a", "b", "a", "a"]


def test_the_memo_hands_out_copies_and_keys_every_input() -> None:
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(n, 2, 4, generator=gen) for n in (3, 6, 6))
    with example_memo.one_example() as memo:
        first = scenarios.dense_reference(q, k, v, 0.5)
        kept = first.clone()
        first.add_(100.0)  # a body altering its expected output: the next body reads the reference's
        assert torch.equal(scenarios.dense_reference(q, k, v, 0.5), kept)
        assert len(memo) == 1
        # Any input that differs is another computation: one value, the scale, the dtype, the shape.
        k2 = k.clone()
        k2[5, 1, 3] = torch.nextafter(k2[5, 1, 3], torch.tensor(9.0))
        scenarios.dense_reference(q, k2, v, 0.5)
        scenarios.dense_reference(q, k, v, 0.25)
        scenarios.dense_reference(q.to(torch.float16), k.to(torch.float16), v.to(torch.float16), 0.5)
        scenarios.dense_reference(q[:2], k, v, 0.5)
        assert len(memo) == 5


def shared_examples(
    check: Callable[[st.DataObject, Any, Policy], None], policies: dict[str, Policy], examples: int,
) -> tuple[SharedPolicies, list[tuple[int, str, int, int]]]:
    """Run ``check`` as a shared-run property over ``policies``: per body, (example, policy, memo entries
    when it started, reference computations it made)."""
    computed = [0]
    original = scenarios._dense_reference

    def counting(*args: Any) -> torch.Tensor:
        computed[0] += 1
        return original(*args)

    shared = SharedPolicies(list(policies), list(policies.values()))
    shared._current = "tests/test_example_memo.py::prop"  # the node id the wrapper records outcomes under
    log: list[tuple[int, str, int, int]] = []
    example = [0]

    def body(data: st.DataObject, impl: Any, sizing_policy: Any) -> None:
        memo = example_memo.current()
        assert memo is not None, "the shared run judges every example inside its memo"
        entries, before = len(memo), computed[0]
        check(data, impl, sizing_policy)
        log.append((example[0], sizing_policy.name, entries, computed[0] - before))

    judged = shared._shared(body)

    @settings(max_examples=examples, database=None, deadline=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate])  # fmt: skip
    @given(data=st.data())
    def prop(data: st.DataObject, impl: Any, sizing_policy: Any) -> None:
        example[0] += 1
        judged(data=data, impl=impl, sizing_policy=sizing_policy)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(scenarios, "_dense_reference", counting)
        prop(impl=TorchImpl("cpu"), sizing_policy=MRV2)
    return shared, log


@pytest.mark.parametrize("check", [
    lambda data, impl, policy: check_cross_attention(data, impl, policy, guarded=False),
    check_self_attention,
], ids=["cross", "self"])  # fmt: skip
def test_the_reference_is_computed_once_per_example_for_every_policy(
    check: Callable[[st.DataObject, Any, Policy], None],
) -> None:
    shared, log = shared_examples(check, {"mrv2": MRV2, "v1": V1}, examples=8)
    assert not shared.own_run["tests/test_example_memo.py::prop"], "both policies hold: none left the run"
    assert example_memo.current() is None
    by_example: dict[int, list[tuple[str, int, int]]] = {}
    for n, policy, entries, computations in log:
        by_example.setdefault(n, []).append((policy, entries, computations))
    assert len(by_example) >= 4
    for bodies in by_example.values():
        (first, entries, computations), *later = bodies
        # Never across examples: each example starts with an empty memo and computes its own reference.
        assert first == "mrv2" and entries == 0 and computations > 0
        # Always across policies: v1 (other widths, so its own body ran) computes nothing again.
        assert all(c == 0 for _, _, c in later), bodies
    assert any(len(bodies) == 2 for bodies in by_example.values()), "v1 never ran a body of its own"
