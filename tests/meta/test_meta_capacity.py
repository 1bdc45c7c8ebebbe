"""Meta-tests: the capacity properties must fail on broken policies.

A property that cannot fail is a defect. Each test runs the suite's own
strategy and assertion, under the ``ci`` profile's settings and budget and
without the pinned examples, against a policy known to be wrong, and demands a
counterexample. Each broken policy must be caught twice: by the strategy as
shipped, and with its stress corner left out, so that what catches it is the
generated decision table and width edges, not one fixed shape. The pre-fix
sizing must also shrink to the Nemotron-Parse shape: encoder tokens above
both ``max_model_len`` and ``max_source_positions``, the latter absent.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from crossattn_sizing.core.capacity import Invariant
from crossattn_sizing.core.policies import BUILTIN_POLICIES, Policy
from crossattn_sizing.findings.results import PropertyFailure
from properties.assertions import assert_invariant
from properties.capacity_strategies import CapacityCase, capacity_cases
from tests.broken_policies import BROKEN

CI = settings.get_profile("ci")


def shrunk_counterexample(
    policy: Policy, invariant: Invariant, stress_corner: bool = True
) -> CapacityCase | None:
    """Run the property body under the ci profile; return the last (shrunk) failing case."""
    failing: list[CapacityCase] = []

    @settings(CI, print_blob=False)
    @given(case=capacity_cases(stress_corner=stress_corner))
    def prop(case: CapacityCase) -> None:
        try:
            assert_invariant(policy, case, invariant)
        except PropertyFailure:
            failing.append(case)
            raise

    try:
        prop()
    except PropertyFailure:
        return failing[-1]
    return None


@pytest.mark.parametrize("invariant", ["coverage", "allocation"])
def test_prefix_sizing_is_caught_with_the_nemotron_shape(invariant: Invariant) -> None:
    case = shrunk_counterexample(BUILTIN_POLICIES["mrv2-prefix"], invariant)
    assert case is not None, f"{invariant} did not catch mrv2-prefix within the ci budget"
    config = case.config
    assert config.max_source_positions is None
    assert max(case.encoder_lens) > config.max_model_len


@pytest.mark.parametrize("stress_corner", [True, False], ids=["shipped", "without-stress-corner"])
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_policy_is_caught(name: str, stress_corner: bool) -> None:
    # Allocation fit is the stricter invariant; coverage must catch the policies
    # that under-size the row itself, so both are demanded where they apply.
    caught = {
        inv: shrunk_counterexample(BROKEN[name], inv, stress_corner) is not None
        for inv in ("coverage", "allocation")
    }
    assert caught["allocation"], f"allocation fit missed broken policy {name}"
    assert caught["coverage"], f"coverage missed broken policy {name}"


@pytest.mark.parametrize("name", [n for n, p in BUILTIN_POLICIES.items() if p.expected_to_hold])
def test_fixed_policies_hold(name: str) -> None:
    for invariant in ("coverage", "allocation"):
        assert shrunk_counterexample(BUILTIN_POLICIES[name], invariant) is None
