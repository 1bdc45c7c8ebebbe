"""The cross-attention DCP inconsistency (docs/spec.md §5), modelled and reported as a finding.

The engine's cross-attention path ignores DCP: token ``p`` uses column
``p // kbs`` on every rank, while the row was sized (and its blocks allocated)
for ``C`` ranks each holding a share. The first test shows, with the smallest
case of the finding's search grid, that this path overflows the *fixed* sizing
(``mrv2``) when ``C > 1``; it passes while the finding stands and prints the example as a
:class:`~crossattn_sizing.findings.FindingWarning`. The property shows the
consistent sharded layout fits every admitted request under the policy under
test.
"""

from __future__ import annotations

import warnings

from hypothesis import event, given
from hypothesis import strategies as st

from crossattn_sizing.findings import (
    FindingWarning,
    dcp_cross_attention_finding,
    faithful_cross_overflow,
    sharded_cross_fits,
    sharded_cross_refusal,
)
from crossattn_sizing.policies import BUILTIN_POLICIES, Policy, checked_widths, policy_name
from crossattn_sizing.results import PropertyFailure
from properties.assertions import reproduce_command
from properties.capacity_strategies import CapacityCase
from properties.finding_strategies import dcp_cross_cases


def test_engine_cross_path_overflows_mrv2_width_under_dcp() -> None:
    """With C > 1 the engine-faithful (unsharded) write path needs more columns than mrv2 gives."""
    finding = dcp_cross_attention_finding(BUILTIN_POLICIES["mrv2"])
    assert finding is not None, "no DCP cross-attention overflow found under mrv2: has the engine changed?"
    assert finding.config.dcp_size > 1
    assert finding.needed > finding.width >= finding.allocated
    widths = checked_widths(BUILTIN_POLICIES["mrv2"], finding.config)
    assert sharded_cross_fits(finding.config, widths, finding.encoder_len), finding.detail
    warnings.warn(FindingWarning(f"{finding.title}\n{finding.detail}"), stacklevel=1)


@given(data=st.data())
def test_sharded_cross_path_fits(data: st.DataObject, sizing_policy: Policy, sizing_policy_spec: str) -> None:
    """The consistent sharded layout maps every admitted encoder token within the row, on every rank."""
    config, e = data.draw(dcp_cross_cases(), label="case")
    widths = checked_widths(sizing_policy, config)
    if faithful_cross_overflow(config, widths, e) is not None:
        event("engine's unsharded path would overflow here")
    refusal = sharded_cross_refusal(config, widths, e)
    if refusal is not None:
        g = config.cross_groups()[0]
        raise PropertyFailure(
            f"sharded cross-attention does not fit under {policy_name(sizing_policy)}: {e} encoder tokens, "
            f"row width {widths[g]} entries\n  config: {config.describe()}\n  {refusal}",
            reproduce_command(sizing_policy_spec, CapacityCase(config, (e,))),
        )
