"""Capacity properties: every admitted token has a column, and no row receives more ids than it holds.

Run against the policy chosen with ``--sizing-policy`` (default ``mrv2``).
Under DCP they are judged against the sharded layout the width formula assumes
(each rank holds its share); the engine's unsharded cross write path under DCP
is a separate finding (see ``crossattn_sizing.findings``).
"""

from __future__ import annotations

from hypothesis import example, given, target

from crossattn_sizing import admission
from crossattn_sizing.checks import Invariant
from crossattn_sizing.policies import Policy, checked_widths
from properties.assertions import assert_invariant
from properties.regressions import pinned_cases, record_failure
from properties.strategies import CapacityCase, capacity_cases


def _record_slack(policy: Policy, case: CapacityCase) -> None:
    """Steer the search toward rows that are just barely too short (or too long)."""
    widths = checked_widths(policy, case.config)
    for gi in case.config.cross_groups():
        group = case.config.groups[gi]
        need = max(admission.entries_needed(case.config, group, e) for e in case.encoder_lens)
        target(float(need - widths[gi]), label="cross entries needed minus given")


def _property(invariant: Invariant):  # type: ignore[no-untyped-def]
    """Build the property test for one invariant, with the pinned regressions as examples."""

    @given(case=capacity_cases())
    def prop(sizing_policy: Policy, sizing_policy_spec: str, case: CapacityCase) -> None:
        _record_slack(sizing_policy, case)
        try:
            assert_invariant(sizing_policy, case, invariant, sizing_policy_spec)
        except AssertionError:
            record_failure(case, f"test_{invariant}", sizing_policy_spec)
            raise

    for pinned in pinned_cases():
        prop = example(case=pinned)(prop)
    prop.__name__ = f"test_{invariant}"
    prop.__doc__ = f"The {invariant} invariant holds for every admitted request in every group."
    return prop


test_coverage = _property("coverage")
test_allocation = _property("allocation")
