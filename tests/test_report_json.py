"""The ``--json`` files of verify, fuzz and audit keep their fields, in order, byte for byte.

Every report goes through the one writer (:func:`crossattn_sizing.runs.outputs.write_json`);
callers (CI, the fleet's parent reading its workers' fuzz summaries) read these names.
"""

from __future__ import annotations

import json
from pathlib import Path

from crossattn_sizing.audit.verdicts import RunnerVerdict
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.commands.audit_report import to_json as audit_json
from crossattn_sizing.commands.fuzz import Totals, summary_json
from crossattn_sizing.findings.results import Finding, PropertyResult
from crossattn_sizing.runs.outputs import write_json
from crossattn_sizing.runs.verify_report import PolicyVerdict, VerifyReport

PROPERTY_KEYS = [
    "name", "outcome", "diagnosis", "falsifying_example", "reproduce", "reruns_test", "replay_decorator",
    "reason", "duration_s", "nodeids", "examples", "events", "best_targets", "replayed", "unjudged", "shared",
]  # fmt: skip


def written(tmp_path: Path, data: object) -> str:
    path = tmp_path / "out.json"
    write_json(path, data)
    return path.read_text(encoding="utf-8")


def test_verify_json_fields(tmp_path: Path) -> None:
    result = PropertyResult("test_coverage", Outcome.HOLDS, examples=3)
    report = VerifyReport("ci", "torch", "cpu", 0, [PolicyVerdict("mrv2", True, [result])],
                          [Finding("a finding", "its detail")], notes=["a note"])  # fmt: skip
    text = written(tmp_path, report.to_json())
    assert text.endswith("}\n") and text.startswith('{\n  "profile": "ci",\n')
    data = json.loads(text)
    assert list(data) == ["profile", "database", "impl", "device", "seed", "exit_status", "verdict",
                          "interrupted", "output_error", "policies", "findings", "notes"]  # fmt: skip
    assert (data["exit_status"], data["verdict"]) == (0, "holds")
    policy = data["policies"][0]
    assert list(policy) == ["policy", "expected_to_hold", "known_failures", "verdict", "unexpected", "error",
                            "properties"]  # fmt: skip
    assert list(policy["properties"][0]) == PROPERTY_KEYS
    assert data["findings"] == [{"title": "a finding", "detail": "its detail"}]


def test_verify_engine_json_fields_and_known_failures(tmp_path: Path) -> None:
    """``verify --engine`` writes the same report: one row named by the spec, its known failures named;
    failing a known one is the harness working (exit 0), failing any other is unexpected (exit 1)."""
    read = "test_read_coverage::test_gathers_stay_in_row_and_own_columns"
    write = "test_read_coverage::test_admitted_requests_fit_their_shared_row"
    spec = "sglang==0.5.23"

    def report(read_outcome: Outcome, write_outcome: Outcome) -> VerifyReport:
        props = [PropertyResult(read, read_outcome, examples=3),
                 PropertyResult(write, write_outcome, examples=3)]  # fmt: skip
        verdict = PolicyVerdict(spec, True, props, known_failures=(read.split("::")[-1],))
        return VerifyReport("ci", spec, "cpu", 0, [verdict], notes=[f"{spec}: SGLang's own builder"])

    data = json.loads(written(tmp_path, report(Outcome.FAILS, Outcome.HOLDS).to_json()))
    assert list(data) == ["profile", "database", "impl", "device", "seed", "exit_status", "verdict",
                          "interrupted", "output_error", "policies", "findings", "notes"]  # fmt: skip
    policy = data["policies"][0]
    assert (policy["policy"], policy["known_failures"]) == (spec, [read.split("::")[-1]])
    assert (data["exit_status"], policy["unexpected"]) == (0, False)
    assert report(Outcome.FAILS, Outcome.FAILS).exit_status == 1  # the write side is expected to hold
    assert report(Outcome.HOLDS, Outcome.NOT_RUN).exit_status == 3
    junit = report(Outcome.HOLDS, Outcome.HOLDS).junit()
    assert "did not catch" in junit and 'failures="1"' in junit  # a known failure that holds is flagged


def test_fuzz_json_fields(tmp_path: Path) -> None:
    totals = Totals()
    totals.rounds = 1
    totals.add("mrv2", [PropertyResult("test_coverage", Outcome.FAILS, diagnosis="short")])
    summary = summary_json(totals, [tmp_path / "r.json"], False) | {"exit_status": 1}
    data = json.loads(written(tmp_path, summary))
    assert list(data) == ["rounds", "interrupted", "properties", "new_regressions", "exit_status"]
    assert list(data["properties"][0]) == ["policy", "property", "examples", "outcome", "events",
                                           "best_targets", "replayed_from_database", "diagnosis"]  # fmt: skip
    assert data["properties"][0]["outcome"] == "fails"


def test_audit_json_fields(tmp_path: Path) -> None:
    verdict = RunnerVerdict("0.24.0", "v2", "ModelRunner V2", Outcome.HOLDS, configs_checked=5)
    data = json.loads(written(tmp_path, audit_json([("0.24.0", [verdict])])))
    assert list(data) == ["exit_status", "exit_statuses", "results"]
    assert data["exit_status"] == 0 and list(data["exit_statuses"]) == ["0", "1", "3"]
    assert list(data["results"][0]) == [
        "source", "runner", "title", "verdict", "path", "wall_s", "where", "reason", "configs_checked",
        "configs_failing", "counterexample", "nemotron_parse", "whisper", "assumed_conditions", "row_entries",
        "row_entries_why", "matches_builtin", "closest_builtin", "equivalent_rules", "encoder_decoder_scope",
        "path_why", "symbolic",
    ]  # fmt: skip
