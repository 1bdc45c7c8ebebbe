"""Assertions of the capacity properties and the DCP finding, written to read as a diagnosis when they fail.

A failure names the config, the request, the first token without a column,
columns needed against given, and a one-line command that reproduces it
outside pytest and Hypothesis.
"""

from __future__ import annotations

from crossattn_sizing.core.admission import encoder_bound
from crossattn_sizing.core.capacity import Invariant, violations
from crossattn_sizing.core.check_line import check_line
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.policies import Policy, checked_widths, policy_name
from crossattn_sizing.findings.dcp import DcpCrossAttentionFinding, sharded_cross_fits, sharded_cross_refusal

from .capacity_strategies import CapacityCase
from .failures import fail, fail_rerun


def assert_invariant(policy: Policy, case: CapacityCase, invariant: Invariant, policy_spec: str = "") -> None:
    """Fail with a readable diagnosis if any request breaks ``invariant``."""
    found = violations(policy, case.config, case.encoder_lens, (invariant,))
    if not found:
        return
    spec = policy_spec or policy_name(policy)
    bound = encoder_bound(case.config)
    lines = [
        f"{invariant} fails under sizing policy {spec!r}",
        f"  config:         {case.config.describe()}",
        f"  encoder tokens: {list(case.encoder_lens)} (admitted bound {bound})",
        f"  widths given:   {checked_widths(policy, case.config)} entries per group",
        *(f"  {v.explain()}" for v in found[:4]),
    ]
    if len(found) > 4:
        lines.append(f"  ... and {len(found) - 4} more")
    fail(lines, check_line(spec, case.config, case.encoder_lens))


def assert_sharded_cross_fits(policy: Policy, policy_spec: str, config: RunnerConfig, e: int) -> None:
    """The consistent sharded layout maps all ``e`` encoder tokens within the row, on every rank."""
    widths = checked_widths(policy, config)
    refusal = sharded_cross_refusal(config, widths, e)
    if refusal is None:
        return
    g = config.cross_groups()[0]
    fail(
        [
            f"sharded cross-attention does not fit under {policy_name(policy)}: {e} encoder tokens, "
            f"row width {widths[g]} entries",
            f"  config: {config.describe()}",
            f"  {refusal}",
        ],
        check_line(policy_spec or policy_name(policy), config, (e,)),
    )


def assert_finding_stands(
    finding: DcpCrossAttentionFinding | None, widths_of: Policy
) -> DcpCrossAttentionFinding:
    """The DCP finding still shows: with ``C > 1`` the engine's unsharded cross path needs more
    columns than the row gives, while the sharded layout the width assumes fits."""
    if finding is None:
        fail_rerun(["no DCP cross-attention overflow found under mrv2: has the engine changed?"])
    problems = []
    if finding.config.dcp_size <= 1:
        problems.append(f"its config has no DCP (C = {finding.config.dcp_size})")
    if not finding.needed > finding.width >= finding.allocated:
        problems.append(f"needed {finding.needed}, width {finding.width}, allocated {finding.allocated}: "
                        "not needed > width >= allocated")
    widths = checked_widths(widths_of, finding.config)
    if not sharded_cross_fits(finding.config, widths, finding.encoder_len):
        problems.append("the sharded layout does not fit either")
    if problems:
        fail_rerun([f"the DCP finding is not what it claims: {'; '.join(problems)}", finding.detail])
    return finding
