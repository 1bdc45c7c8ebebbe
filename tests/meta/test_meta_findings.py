"""Meta-tests: the DCP cross-attention finding and its property can each come out the other way.

The finding's test passes while the engine's unsharded cross path overflows
rows sized for ``C`` ranks; the search must say "no finding" for an engine
whose rows are sized for that path, or the test could never notice the engine
changed. The sharded-layout property must fail for a policy that shrinks
cross rows too far.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import settings

from crossattn_sizing.base.intmath import cdiv
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.known_configs import nemotron_parse
from crossattn_sizing.core.policies import BUILTIN_POLICIES, checked_widths
from crossattn_sizing.findings.dcp import dcp_cross_attention_finding
from crossattn_sizing.findings.results import PropertyFailure
from properties.test_dcp_finding import test_sharded_cross_path_fits
from tests.broken_policies import BROKEN


def sized_for_the_unsharded_path(config: RunnerConfig) -> tuple[int, ...]:
    """mrv2's widths as if there were no DCP: what an engine reading cross rows unsharded needs."""
    alone = dataclasses.replace(config, dcp_size=1, dcp_interleave=1)
    return checked_widths(BUILTIN_POLICIES["mrv2"], alone)


def test_no_finding_when_rows_fit_the_unsharded_path() -> None:
    assert dcp_cross_attention_finding(sized_for_the_unsharded_path) is None


def test_finding_is_the_least_overflowing_case() -> None:
    """One token fewer than the finding's example fits the engine's path (the search took the smallest)."""
    found = dcp_cross_attention_finding(BUILTIN_POLICIES["mrv2"])
    assert found is not None
    assert found.needed == found.width + 1
    kbs = found.config.groups[0].kbs
    assert cdiv(found.encoder_len - 1, kbs) == found.width


@pytest.mark.parametrize("name", ["dcp_twice"])
def test_sharded_property_catches(name: str) -> None:
    prop = settings(settings.get_profile("ci"), print_blob=False)(test_sharded_cross_path_fits)
    with pytest.raises(PropertyFailure):
        prop(sizing_policy=BROKEN[name], sizing_policy_spec=f"tests.broken_policies:{name}")


def captures_what_is_admitted(config: RunnerConfig) -> int:
    """A capture rule that takes the admitted bound into account: what an engine without the gap does."""
    from crossattn_sizing.core.admission import encoder_bound

    return max(config.source_positions, config.max_model_len, encoder_bound(config))


def test_no_graph_capture_finding_when_capture_covers_the_admitted_bound() -> None:
    from crossattn_sizing.findings.graph_capture import graph_capture_finding

    assert graph_capture_finding(captures_what_is_admitted) is None


def test_graph_capture_finding_names_the_nemotron_shape_under_the_engine_rule() -> None:
    from crossattn_sizing.findings.graph_capture import graph_capture_finding

    found = graph_capture_finding()
    assert found is not None
    assert found.above[0].shape.config == nemotron_parse()
    assert found.above[0].captured == 2048 and found.above[0].admitted == 4096
