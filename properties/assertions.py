"""Assertions of the capacity properties, written to read as a diagnosis when they fail.

A failure names the config, the request, the first token without a column,
columns needed against given, and a one-line command that reproduces it
outside pytest and Hypothesis.
"""

from __future__ import annotations

import json
import shlex

from crossattn_sizing.admission import encoder_bound
from crossattn_sizing.capacity import Invariant, violations
from crossattn_sizing.policies import Policy, checked_widths, policy_name
from crossattn_sizing.results import PropertyFailure
from properties.capacity_strategies import CapacityCase


def reproduce_command(policy_spec: str, case: CapacityCase) -> str:
    """The ``crossattn-sizing check`` line that replays a case."""
    config = json.dumps(case.config.to_dict(), separators=(",", ":"), sort_keys=True)
    lens = ",".join(str(e) for e in case.encoder_lens)
    return (
        f"crossattn-sizing check --policy {shlex.quote(policy_spec)} "
        f"--config {shlex.quote(config)} --encoder-lens {lens}"
    )


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
    raise PropertyFailure("\n".join(lines), reproduce_command(spec, case))
