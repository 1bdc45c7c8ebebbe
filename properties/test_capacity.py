"""Capacity properties: every admitted token has a column, and no row receives more ids than it holds.

Run against the policy chosen with ``--policy`` (default ``mrv2``).
Under DCP they are judged against the sharded layout the width formula assumes
(each rank holds its share); the engine's unsharded cross write path under DCP
is a separate finding (see ``crossattn_sizing.findings.dcp``).

No ``target()``: the strategies draw width edges directly, and hill-climbing
a near-miss score spent half of a 200-example budget around one example,
starving the decision table's other cells.
"""

from __future__ import annotations

from hypothesis import example, given

from crossattn_sizing.core.capacity import Invariant
from crossattn_sizing.core.policies import Policy
from crossattn_sizing.findings.results import PropertyFailure
from crossattn_sizing.runs.pytest_plugin import RegressionFiles

from .assertions import assert_invariant
from .capacity_strategies import CapacityCase, capacity_cases
from .regressions import pinned_cases, record_failure


def _property(invariant: Invariant):
    """Build the property test for one invariant, with the pinned regressions as examples."""

    @given(case=capacity_cases())
    def prop(
        sizing_policy: Policy,
        sizing_policy_spec: str,
        sizing_regressions: RegressionFiles,
        case: CapacityCase,
    ) -> None:
        try:
            assert_invariant(sizing_policy, case, invariant, sizing_policy_spec)
        except PropertyFailure:
            record_failure(case, f"test_{invariant}", sizing_policy_spec, sizing_regressions)
            raise

    for pinned in pinned_cases():
        prop = example(case=pinned)(prop)
    prop.__name__ = f"test_{invariant}"
    prop.__doc__ = f"The {invariant} invariant holds for every admitted request in every group."
    return prop


test_coverage = _property("coverage")
test_allocation = _property("allocation")
