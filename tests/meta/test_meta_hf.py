"""Meta-tests: the transformers output-match property must fail on deliberately broken setups.

A differential property that cannot fail proves nothing. Each test runs the
property's own strategy and assertion under the ``ci`` profile's settings and
budget against one broken wiring (scaling left out, keys and values swapped, a
cross row one column short read unguarded) or a sizing policy known to be
short (the pre-fix ``mrv2-prefix`` with a BART ``--max-model-len`` below its
source length), and demands a counterexample with a diagnosis that says what
went wrong.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

from crossattn_sizing.core.policies import BUILTIN_POLICIES, Policy
from crossattn_sizing.findings.results import PropertyFailure
from crossattn_sizing.impl import Impl

# The property module switches the hub off and skips (this module with it) where
# transformers is missing, before anything imports it: so it is the one properties
# import here, and the strategies come through it.
from properties.test_hf_cross_attention import (
    CORRECT,
    PINNED,
    HFCrossCase,
    Wiring,
    assert_matches_transformers,
    hf_cross_cases,
    mismatch,
    run_case,
)

CI = settings.get_profile("ci")
MRV2 = BUILTIN_POLICIES["mrv2"]


@pytest.fixture(autouse=True, scope="module")
def _one_intra_op_thread():  # type: ignore[no-untyped-def]
    """Tiny tensors: intra-op threads cost more than they save (see the property module)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def counterexample(
    impl: Impl,
    wiring: Wiring,
    policy: Policy = MRV2,
    family: str | None = None,
    min_requests: int = 1,
) -> tuple[HFCrossCase, str] | None:
    """Run the property body under the ci profile; the last (shrunk) failing case and its message."""
    failing: list[tuple[HFCrossCase, str]] = []

    @settings(CI, print_blob=False)
    @given(case=hf_cross_cases(family, min_requests))
    def prop(case: HFCrossCase) -> None:
        try:
            assert_matches_transformers(case, impl, policy, wiring=wiring)
        except PropertyFailure as exc:
            failing.append((case, str(exc)))
            raise

    try:
        prop()
    except Exception:
        if not failing:
            raise
        return failing[-1]
    return None


def test_the_correct_wiring_matches_on_the_pinned_cases(impl: Impl) -> None:
    for case in PINNED.values():
        assert mismatch(run_case(case, impl, MRV2, CORRECT)) is None


def test_leaving_out_the_scaling_is_caught(impl: Impl) -> None:
    found = counterexample(impl, Wiring(drop_scaling=True))
    assert found is not None, "dropping the attention scale went unnoticed within the ci budget"
    _, message = found
    assert "differs from transformers' own forward" in message
    assert "max abs error" in message


def test_swapping_keys_and_values_is_caught(impl: Impl) -> None:
    found = counterexample(impl, Wiring(swap_kv=True))
    assert found is not None, "a key/value swap went unnoticed within the ci budget"
    assert "output values off" in found[1]


def test_a_row_one_column_short_read_unguarded_is_caught(impl: Impl) -> None:
    found = counterexample(impl, Wiring(short_row=True), min_requests=2)
    assert found is not None, "a row one column short went unnoticed within the ci budget"
    case, message = found
    # The spill needs a neighbour: the shrunk case keeps two requests in adjacent rows.
    assert len(case.encoder_lens) >= 2
    assert "request 0" in message


def test_the_prefix_sizing_fails_for_bart_below_its_source_length(impl: Impl) -> None:
    found = counterexample(impl, CORRECT, policy=BUILTIN_POLICIES["mrv2-prefix"], family="bart")
    assert found is not None, "mrv2-prefix was not caught on BART within the ci budget"
    case, message = found
    # The bug's shape through the real config: no max_source_positions, M below the source length.
    assert case.source_positions is None
    assert case.max_model_len is not None and max(case.encoder_lens) > case.max_model_len
    assert "without a column" in message
    assert "crossattn-sizing check --policy mrv2-prefix" in message


def test_whisper_is_safe_under_the_prefix_sizing(impl: Impl) -> None:
    """Whisper's S covers its encoder frames, so even the pre-fix sizing holds (spec: not affected)."""
    assert counterexample(impl, CORRECT, policy=BUILTIN_POLICIES["mrv2-prefix"], family="whisper") is None
