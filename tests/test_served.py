"""The served domain (docs/spec.md §12) and the "latent" verdict, on hand-computed anchors.

The lengths each family's preprocessing gives a request, the whole-batch
judge (the pool, the running-request limit, chunked prefill), and how a
latent violation flows: a property's result, verify's table, JUnit and exit
status, and ``report``'s list of what it writes up (a latent one: nothing).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crossattn_sizing.base.outcome import EXIT_FAILS, EXIT_HOLDS, Outcome, exit_status
from crossattn_sizing.core import served
from crossattn_sizing.core.served import LATENT, BatchAdmission, served_refusal
from crossattn_sizing.findings.results import PropertyFailure, PropertyResult
from crossattn_sizing.runs.engine_verdicts import EngineVerdicts
from crossattn_sizing.runs.verify_report import PolicyVerdict, VerifyReport


def test_mllama_images_are_whole_tiles() -> None:
    model = served.mllama(1601, 4)
    assert model.lengths == (1601, 3202, 4803, 6404)
    assert model.refusal(0) is None  # a prompt without an image
    assert model.refusal(6404) is None
    assert "gives no request 11 encoder tokens" in (model.refusal(11) or "")
    assert model.refusal(1600) is not None and model.refusal(8005) is not None  # a tile short, a 5th tile


def test_whisper_always_has_its_1500_frames() -> None:
    model = served.whisper()
    assert model.lengths == (1500,)
    assert model.refusal(1500) is None
    assert model.refusal(1499) is not None and model.refusal(0) is not None  # no text-only Whisper request


def test_text_encoders_reach_their_positions() -> None:
    bart = served.positional("BART", 1024)
    assert bart.refusal(1) is None and bart.refusal(1024) is None and bart.refusal(1025) is not None


def test_lengths_must_be_ascending_and_positive() -> None:
    with pytest.raises(ValueError):
        served.EncoderLengths("x", (3, 2), False, "")
    with pytest.raises(ValueError):
        served.EncoderLengths("x", (0,), False, "")


def test_the_pool_is_judged_for_the_batch_at_once() -> None:
    batch = [(6404, 20, 21), (0, 3000, 3001)]  # 6425 + 3001 = 9426 slots
    assert BatchAdmission(9426).refusal(batch) is None
    assert BatchAdmission(9425).refusal(batch) == (
        "the batch holds 6425 + 3001 = 9426 KV slots at once; the pool holds 9425")


def test_the_running_request_limit_and_the_prefill_chunk() -> None:
    batch = [(1601, 1, 2), (0, 5, 6), (0, 5, 6)]
    assert "3 running requests > max_running_requests 2" in (
        BatchAdmission(10**6, max_running_requests=2).refusal(batch) or "")
    assert BatchAdmission(10**6, max_running_requests=3).refusal(batch) is None
    assert "never split" in (BatchAdmission(10**6, chunked_prefill_size=1600).refusal(batch) or "")
    assert BatchAdmission(10**6, chunked_prefill_size=1601).refusal(batch) is None


def test_served_refusal_names_the_request_first_then_the_batch() -> None:
    model = served.mllama(1601, 4)
    assert (served_refusal(model, BatchAdmission(339), [(11, 1, 2), (0, 332, 333)]) or "").startswith(
        "request 0: Mllama gives no request 11")
    assert "346 KV slots" in (served_refusal(model, BatchAdmission(339), [(0, 1, 13), (0, 332, 333)]) or "")
    assert served_refusal(model, BatchAdmission(1616), [(1601, 1, 2), (0, 12, 13)]) is None


def test_the_families_read_from_transformers() -> None:
    pytest.importorskip("transformers", reason="the 'hf' extra is not installed")
    from crossattn_sizing.models import served_inputs

    assert served_inputs.mllama_images().lengths == (1601, 3202, 4803, 6404)
    assert served_inputs.whisper_audio().lengths == (1500,)
    assert served_inputs.nemotron_parse_pages().lengths == (3201, 3329)
    assert served_inputs.text_sources("BART").lengths[-1] == 1024
    assert served_inputs.text_sources("mBART").lengths[-1] == 1024
    assert served_inputs.text_sources("T5").lengths[-1] == 512
    with pytest.raises(ValueError):
        served_inputs.text_sources("GPT-2")


def latent_result(name: str = "p::latent") -> PropertyResult:
    result = PropertyResult(name)
    failure = PropertyFailure("read-side coverage: past the row", "crossattn-sizing check ...", latent=True)
    result.fail(failure, "", "", "")
    return result


def test_a_latent_failure_is_its_own_verdict_and_not_a_failure() -> None:
    result = latent_result()
    assert result.outcome == Outcome.LATENT and result.outcome.judged
    assert exit_status([Outcome.HOLDS, Outcome.LATENT]) == EXIT_HOLDS
    assert exit_status([Outcome.FAILS, Outcome.LATENT]) == EXIT_FAILS
    failing = PropertyResult("p::latent", Outcome.FAILS, diagnosis="served")
    result.merge(failing)  # a failure outranks a latent violation
    assert result.outcome == Outcome.FAILS and result.diagnosis == "served"
    again = PropertyResult("p::latent", Outcome.HOLDS)
    again.merge(latent_result())
    assert again.outcome == Outcome.LATENT


def test_verify_and_report_say_latent_and_write_nothing_up(tmp_path: Path) -> None:
    results = [PropertyResult("p::served", Outcome.HOLDS), latent_result()]
    verdict = PolicyVerdict("sglang@tree", True, results)
    report = VerifyReport("ci", "torch", "cpu", None, [verdict])
    assert verdict.holds and verdict.outcome == Outcome.HOLDS and report.exit_status == EXIT_HOLDS
    markdown = report.markdown({})
    assert f"## sglang@tree / p::latent latent ({LATENT})" in markdown
    junit = report.junit()
    assert "<failure" not in junit and LATENT in junit
    engine = EngineVerdicts("sglang@tree", "sglang", tmp_path, report)
    assert engine.failing == [] and [p.name for p in engine.latent] == ["p::latent"]
