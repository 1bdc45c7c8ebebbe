"""The cross-attention DCP inconsistency (docs/spec.md §5), modelled and reported as a finding.

The engine's cross-attention path ignores DCP: token ``p`` uses column
``p // kbs`` on every rank, while the row was sized (and its blocks allocated)
for ``C`` ranks each holding a share. The first test shows, with the smallest
case of the finding's search grid, that this path overflows the *fixed* sizing
(``mrv2``) when ``C > 1``; it passes while the finding stands and prints the example as a
:class:`~crossattn_sizing.findings.dcp.FindingWarning`. The property shows the
consistent sharded layout fits every admitted request under the policy under
test.
"""

from __future__ import annotations

import warnings

from hypothesis import event, given
from hypothesis import strategies as st

from crossattn_sizing.core.policies import BUILTIN_POLICIES, Policy, checked_widths
from crossattn_sizing.findings.dcp import (
    FindingWarning,
    dcp_cross_attention_finding,
    unsharded_cross_overflow,
)

from .assertions import assert_finding_stands, assert_sharded_cross_fits
from .finding_strategies import dcp_cross_cases


def test_engine_cross_path_overflows_mrv2_width_under_dcp() -> None:
    """With C > 1 the engine-faithful (unsharded) write path needs more columns than mrv2 gives."""
    mrv2 = BUILTIN_POLICIES["mrv2"]
    finding = assert_finding_stands(dcp_cross_attention_finding(mrv2), mrv2)
    warnings.warn(FindingWarning(f"{finding.title}\n{finding.detail}"), stacklevel=1)


@given(data=st.data())
def test_sharded_cross_path_fits(data: st.DataObject, sizing_policy: Policy, sizing_policy_spec: str) -> None:
    """The consistent sharded layout maps every admitted encoder token within the row, on every rank."""
    config, e = data.draw(dcp_cross_cases(), label="case")
    widths = checked_widths(sizing_policy, config)
    if unsharded_cross_overflow(config, widths, e) is not None:
        event("engine's unsharded path would overflow here")
    assert_sharded_cross_fits(sizing_policy, sizing_policy_spec, config, e)
