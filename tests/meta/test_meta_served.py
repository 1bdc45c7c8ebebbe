"""Meta-tests: the read side draws only batches a server decodes, and says "latent" beyond them.

- The served strategy (``properties/read_strategies.py`` ``mixed_batches``)
  gives every image request a whole number of Mllama tiles (1601 tokens each,
  hand-computed from Llama-3.2-Vision's 560 px and patch 14: 40*40 + 1) and
  keeps the batch within the pool; the same check catches a strategy broken to
  emit 11-token images.
- The batch judge refuses the issue's batch: 346 KV slots held at once in a
  pool of 339, although each request is admitted alone.
- A builder that reads past a row only for encoder lengths no Mllama image has
  holds on the served property and is "latent" (never "fails") on the
  unserved one (the FA3 gather shape failing the served property on whole
  tiles: tests/meta/test_meta_read_coverage.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings

from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.core.admission_rules import EngineRequest, SglangAdmission, admitted
from crossattn_sizing.core.layouts import SharedRow
from crossattn_sizing.core.read_gather import BatchRequest, Gather, bounded_gather
from crossattn_sizing.core.served import LATENT, BatchAdmission
from crossattn_sizing.findings.results import PropertyFailure, PropertyResult
from properties import read_strategies, test_read_coverage
from properties.read_strategies import ReadCase

pytest.importorskip("transformers", reason="the 'hf' extra is not installed")

TILE = 40 * 40 + 1
"""Llama-3.2-Vision's tokens a tile, by hand: (560 // 14)^2 patches and the class token."""

DRAWS = settings(max_examples=40, derandomize=True, database=None, deadline=None,
                 suppress_health_check=list(HealthCheck))  # fmt: skip


def unserved(case: ReadCase) -> list[str]:
    """What the test itself sees wrong in a drawn case (independent of the strategy's own judge)."""
    problems = [f"request {i}: {r.encoder_len} encoder tokens is not 1 to 4 whole tiles of {TILE}"
                for i, r in enumerate(case.requests)
                if r.encoder_len % TILE or not 0 <= r.encoder_len // TILE <= 4]  # fmt: skip
    held = sum(b.encoder_len + b.decoder_len for b in case.batch)
    if held > case.rule.kv_capacity:
        problems.append(f"the batch holds {held} slots, the pool {case.rule.kv_capacity}")
    return problems


def drawn_problems() -> list[str]:
    """Every problem :func:`unserved` finds in :data:`DRAWS` cases of ``mixed_batches``."""
    found: list[str] = []

    @DRAWS
    @given(case=read_strategies.mixed_batches())
    def draw(case: ReadCase) -> None:
        assert any(r.encoder_len for r in case.requests) and any(not r.encoder_len for r in case.requests)
        found.extend(unserved(case))

    draw()
    return found


def test_the_served_strategy_draws_whole_tiles_within_the_pool() -> None:
    assert drawn_problems() == []


def test_a_strategy_emitting_11_token_images_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    from crossattn_sizing.core import served

    monkeypatch.setattr(read_strategies, "mllama_images", lambda: served.mllama(11, 4))
    problems = drawn_problems()
    assert problems and all("is not 1 to 4 whole tiles" in p for p in problems)
    assert any(": 11 encoder tokens" in p for p in problems)


def test_the_served_judge_refuses_an_11_token_image() -> None:
    case = ReadCase(SharedRow(340), SglangAdmission(340, 339), (EngineRequest(11, 1, 1),
                    EngineRequest(0, 12, 1)), (BatchRequest(11, 2), BatchRequest(0, 13)))  # fmt: skip
    assert "gives no request 11 encoder tokens" in (case.served_refusal() or "")


def test_the_batch_judge_refuses_346_slots_in_a_339_slot_pool() -> None:
    """The issue's batch: each request admitted alone (inputs 12 and 332 < max_req_input_len 333), and
    together 13 + 333 = 346 slots at once in a pool of 339."""
    rule = SglangAdmission(context_len=340, kv_capacity=339)
    requests = [EngineRequest(11, 1, 1), EngineRequest(0, 332, 1)]
    assert all(admitted(rule, r) for r in requests)  # per-request judging lets both in
    batch = [(11, 1, 2), (0, 332, 333)]
    assert BatchAdmission(339).refusal(batch) == (
        "the batch holds 13 + 333 = 346 KV slots at once; the pool holds 339")
    assert BatchAdmission(346).refusal(batch) is None  # the boundary: exactly the pool


def latent_only(batch: Sequence[BatchRequest]) -> list[Gather]:
    """The bounded gather, reading far past its row for a request whose encoder is not whole tiles."""
    gathers = bounded_gather(batch)
    bad = {i for i, r in enumerate(batch) if r.encoder_len % TILE}
    return [g._replace(columns=range(g.columns.start, g.columns.stop + 10**6)) if g.row in bad else g
            for g in gathers]  # fmt: skip


def test_a_read_wrong_only_outside_the_served_domain_is_latent() -> None:
    test_read_coverage.test_gathers_stay_in_row_and_own_columns(read_builder=latent_only)  # holds
    with pytest.raises(PropertyFailure) as info:
        test_read_coverage.test_reads_beyond_served_batches_are_latent(read_builder=latent_only)
    assert info.value.latent and LATENT in str(info.value)
    result = PropertyResult("test_read_coverage::test_reads_beyond_served_batches_are_latent")
    result.fail(info.value, "", "", "")
    assert result.outcome == Outcome.LATENT
