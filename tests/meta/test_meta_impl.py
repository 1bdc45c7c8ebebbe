"""Meta-tests: the differential properties must fail on broken implementations.

A property that cannot fail is a defect. Each test runs a property's own body
(strategies, scenario and assertion) with Hypothesis under the ``ci`` profile's
settings against an implementation broken in one known way, and demands a
``PropertyFailure`` from the property's assertions, not a crash or a bare
``assert``. The pre-fix sizing with the unguarded tables must fail by showing
the wrong output.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from crossattn_sizing.core.policies import BUILTIN_POLICIES
from crossattn_sizing.findings.results import PropertyFailure
from crossattn_sizing.impl import Impl, TorchImpl
from crossattn_sizing.impl.runner import WrongAnswer
from properties.test_attention import check_cross_attention, check_nemotron_parse, check_self_attention
from properties.test_slot_mapping import check_slot_mapping
from tests.broken_impls import BROKEN_CROSS, BROKEN_SELF, BROKEN_SLOT_MAPPINGS

CI = settings.get_profile("ci")
# Catching a broken implementation needs a failing example, not the smallest
# one: shrinking a multi-request attention scenario costs up to a minute per
# test on a 2-core box and proves nothing more, so the shrink phase is left out.
CAUGHT = settings(CI, print_blob=False, phases=[Phase.explicit, Phase.reuse, Phase.generate])
MRV2 = BUILTIN_POLICIES["mrv2"]
PREFIX = BUILTIN_POLICIES["mrv2-prefix"]


def failure(body: Callable[[st.DataObject], None], budget: settings = CAUGHT) -> str | None:
    """Run ``body`` as a property under the ci settings; the failure message, or None if it held."""

    @budget
    @given(data=st.data())
    def prop(data: st.DataObject) -> None:
        body(data)

    try:
        prop()
    except (PropertyFailure, WrongAnswer) as exc:  # WrongAnswer: the judge refused the answer's form
        return str(exc)  # (an infinite lse, a wrong shape) before the property compared it: caught too
    return None


@pytest.mark.parametrize("name", sorted(BROKEN_SLOT_MAPPINGS))
def test_slot_mapping_property_catches(name: str) -> None:
    impl = BROKEN_SLOT_MAPPINGS[name]("cpu")
    message = failure(lambda data: check_slot_mapping(data, impl))
    assert message is not None, f"the slot-mapping property missed {name}"
    assert "differ from the reference" in message


@pytest.mark.parametrize("name", sorted(BROKEN_CROSS))
def test_cross_attention_property_catches(name: str) -> None:
    impl: Impl = BROKEN_CROSS[name]("cpu")
    message = failure(lambda data: check_cross_attention(data, impl, MRV2, guarded=True))
    assert message is not None, f"the cross-attention property missed {name}"
    # a softmax without its max overflows: the judge refuses the infinite lse before comparing outputs
    assert "WRONG OUTPUT" in message or "returned lse with infinite values" in message


@pytest.mark.parametrize("name", sorted(BROKEN_SELF))
def test_self_attention_property_catches(name: str) -> None:
    impl: Impl = BROKEN_SELF[name]("cpu")
    message = failure(lambda data: check_self_attention(data, impl, MRV2))
    assert message is not None, f"the self-attention property missed {name}"
    # a softmax without its max overflows: the judge refuses the infinite lse before comparing outputs
    assert "WRONG OUTPUT" in message or "returned lse with infinite values" in message


def test_prefix_sizing_unguarded_shows_the_wrong_output() -> None:
    """mrv2-prefix, engine-faithful tables: the property fails with the damage, not a crash."""
    message = failure(lambda data: check_cross_attention(data, TorchImpl("cpu"), PREFIX, guarded=False))
    assert message is not None, "the cross-attention property missed the pre-fix sizing"
    assert "WRONG OUTPUT: max abs error" in message
    assert "had no column" in message


def test_prefix_sizing_guarded_is_refused_with_the_capacity_error() -> None:
    message = failure(lambda data: check_cross_attention(data, TorchImpl("cpu"), PREFIX, guarded=True))
    assert message is not None
    assert "refused an access before any kernel ran" in message


@pytest.mark.parametrize("guarded", [False, True])
def test_nemotron_parse_page_fails_only_under_the_prefix_sizing(guarded: bool) -> None:
    impl = TorchImpl("cpu")
    check_nemotron_parse(impl, MRV2, guarded)
    with pytest.raises(PropertyFailure) as info:
        check_nemotron_parse(impl, PREFIX, guarded)
    expected = "refused" if guarded else "tokens 2048..3328 (1281 of 3329) had no column"
    assert expected in str(info.value)
