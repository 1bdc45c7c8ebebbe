"""Meta-tests: the read-side property fails on SGLang 0.5.23's FA3 gather shape and holds when the
gather is bounded by each request's own length; the write-side one fails on a layout one column short."""

from __future__ import annotations

import pytest

from crossattn_sizing.core import layouts
from crossattn_sizing.core.read_gather import bounded_gather, sglang_fa3_gather
from crossattn_sizing.findings.results import PropertyFailure
from properties import test_read_coverage


def test_read_property_fails_on_the_fa3_gather() -> None:
    with pytest.raises(PropertyFailure) as info:
        test_read_coverage.test_gathers_stay_in_row_and_own_columns(read_builder=sglang_fa3_gather)
    text = str(info.value)
    assert "past the row (width" in text and "E=0" in text  # a text-only request beside an encoder one
    assert "--read-builder sglang-fa3" in info.value.reproduce
    # Shrunk inside the served domain: every image a whole number of Llama-3.2-Vision tiles (40*40 + 1).
    encoders = [int(line.split("encoder ")[1].split(",")[0]) for line in text.splitlines()
                if line.strip().startswith("request ")]  # fmt: skip
    assert any(encoders) and all(e % 1601 == 0 for e in encoders), text


def test_read_property_holds_on_the_bounded_gather() -> None:
    test_read_coverage.test_gathers_stay_in_row_and_own_columns(read_builder=bounded_gather)


def test_write_property_fails_when_the_row_loses_its_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    # Width context_len - 200 instead of + 4: an admitted request of 200 tokens or more no longer fits.
    monkeypatch.setattr(layouts, "SGLANG_EXTRA_CONTEXT", -200)
    with pytest.raises(PropertyFailure):
        test_read_coverage.test_admitted_requests_fit_their_shared_row(read_builder=bounded_gather)


def test_consuming_an_unwritten_column_fails() -> None:
    """A builder whose kernel reads one column past the request's own tokens (still in the row) fails."""
    def one_past(batch):  # type: ignore[no-untyped-def]
        return [g._replace(columns=range(g.columns.start, g.columns.stop + 1),
                                                                consumed=g.consumed + 1)
                for g in bounded_gather(batch) if g.attention == "self"]

    with pytest.raises(PropertyFailure, match="never wrote"):
        test_read_coverage.test_gathers_stay_in_row_and_own_columns(read_builder=one_past)


def test_read_property_fails_on_the_recorded_sglang_tree_with_a_check_line() -> None:
    from crossattn_sizing.engine.sglang.client import SglangReads
    from tests.sglang_tree import SPEC

    with pytest.raises(PropertyFailure) as info:
        test_read_coverage.test_gathers_stay_in_row_and_own_columns(read_builder=SglangReads(SPEC))
    assert "eager: self-attention gather read pool row" in str(info.value)
    assert info.value.reproduce.startswith(f"crossattn-sizing check --engine {SPEC} --context-len ")


def test_read_property_holds_on_the_tree_with_the_bounded_gather(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from crossattn_sizing.engine.sglang.client import SglangReads
    from tests.sglang_tree import bounded_copy

    tree = bounded_copy(tmp_path / "bounded")
    test_read_coverage.test_gathers_stay_in_row_and_own_columns(read_builder=SglangReads(f"sglang@{tree}"))
