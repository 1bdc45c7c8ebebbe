"""Nothing reads "holds" unless it ran and held: verdicts, exit statuses and the machine outputs."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from crossattn_sizing.findings.results import PropertyResult
from crossattn_sizing.runs.outputs import ReportFiles
from crossattn_sizing.runs.verify_report import PolicyVerdict, VerifyReport
from tests.processes import cli, run


def prop(outcome: str, name: str = "p") -> PropertyResult:
    return PropertyResult(name, outcome=outcome, examples=0 if outcome == "not run" else 5)


@pytest.mark.parametrize(
    ("outcomes", "interrupted", "verdict"),
    [
        ([], False, "not run"),  # a deselected suite
        (["not run"], False, "not run"),  # zero examples
        (["holds", "not run"], False, "not run"),
        (["n/a"], False, "not run"),  # nothing applied, nothing held
        (["holds", "n/a"], False, "holds"),
        (["holds", "fails"], False, "fails"),
        (["holds"], True, "interrupted"),
        (["fails"], True, "fails"),  # a failure found before Ctrl-C is still a failure
    ],
)
def test_a_policy_holds_only_when_something_ran_and_held(
    outcomes: list[str], interrupted: bool, verdict: str
) -> None:
    props = [prop(o, f"p{i}") for i, o in enumerate(outcomes)]
    v = PolicyVerdict("mrv2", True, props, interrupted=interrupted)
    assert v.outcome == verdict
    assert v.holds == (verdict == "holds")


@pytest.mark.parametrize(
    ("verdicts", "interrupted", "status"),
    [
        ([PolicyVerdict("mrv2", True, [prop("holds")])], False, 0),
        ([PolicyVerdict("mrv2-prefix", False, [prop("fails")])], False, 0),  # caught, as expected
        ([PolicyVerdict("mrv2", True, [prop("fails")])], False, 1),
        ([PolicyVerdict("mrv2", True, [prop("not run")])], False, 3),
        ([], False, 3),
        ([PolicyVerdict("mrv2", True, [prop("fails")])], True, 130),  # Ctrl-C wins: the run did not finish
        ([PolicyVerdict("mrv2", True, [prop("holds")], interrupted=True)], True, 130),
    ],
)
def test_exit_status_says_what_the_report_says(
    verdicts: list[PolicyVerdict], interrupted: bool, status: int
) -> None:
    report = VerifyReport("ci", "torch", "cpu", None, verdicts, interrupted=interrupted)
    assert report.exit_status == status
    data = report.to_json()
    assert data["exit_status"] == status and data["interrupted"] is interrupted
    assert data["verdict"] == {0: "holds", 1: "fails", 3: "not run", 130: "interrupted"}[status]


def test_junit_never_counts_what_did_not_run_as_passed(tmp_path: Path) -> None:
    ran = PolicyVerdict("mrv2", True, [prop("holds", "a"), prop("not run", "b")])
    verdicts = [ran, PolicyVerdict("v1", True, [])]
    report = VerifyReport("ci", "torch", "cpu", None, verdicts)
    ReportFiles(junit_xml=tmp_path / "r.xml").write(junit_xml=report.junit)
    root = ET.parse(tmp_path / "r.xml")
    cases = {f"{c.get('classname')}/{c.get('name')}": c for c in root.iter("testcase")}
    assert len(cases["mrv2/a"]) == 0  # passed
    assert cases["mrv2/b"].find("error") is not None
    assert cases["v1/suite"].find("error") is not None


@pytest.mark.slow
def test_replay_profile_reports_properties_without_pinned_cases_as_not_run(tmp_path: Path) -> None:
    """``--hypothesis-profile replay`` runs only pinned examples: properties that have none did not run
    (exit 3)."""
    out = tmp_path / "r.json"
    proc = run(cli(
        "verify", "--hypothesis-profile", "replay", "--policy", "mrv2",
        "-k", "test_capacity or test_slot_mapping",
        "--json", str(out),
    ))  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    outcomes = {p["name"]: p["outcome"] for p in json.loads(out.read_text())["policies"][0]["properties"]}
    assert outcomes["test_capacity::test_coverage"] == "holds"  # its pinned cases ran
    assert outcomes["test_slot_mapping::test_slot_mapping_matches_reference"] == "not run"


@pytest.mark.slow
def test_a_policy_that_raises_inside_the_suite_is_bad_input_not_a_failure() -> None:
    """It passes the start-up probe (no DCP there) and raises on the suite's first DCP config."""
    proc = run(cli("verify", "--policy", "tests.unusable_policies:raises_for_dcp", "-k", "test_capacity"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "raised NotImplementedError" in proc.stderr and "UNEXPECTED" not in proc.stdout


def test_user_lines_name_no_class_of_the_harness_but_keep_the_kind_of_foreign_errors() -> None:
    """A harness error reads as its message (``ReleaseUnavailable`` is a word for the code, not the
    user); an error of the code under test or of Python keeps its kind, which is part of the story."""
    from crossattn_sizing.base.errors import ReleaseUnavailable, described
    from crossattn_sizing.engine.protocol import failure
    from crossattn_sizing.prove.batches import PolicyRaised

    unavailable = ReleaseUnavailable("vllm==0.19.0 does not import on this machine")
    assert described(unavailable) == "vllm==0.19.0 does not import on this machine"
    assert described(ZeroDivisionError("division by zero")) == "ZeroDivisionError: division by zero"
    assert described(ReleaseUnavailable()) == ReleaseUnavailable.__doc__.splitlines()[0]  # type: ignore[union-attr]
    result = PropertyResult("p")
    result.fail(unavailable, "", "", "")
    assert result.diagnosis == "vllm==0.19.0 does not import on this machine"
    answer = failure(unavailable)  # a worker's answer: what a user line says, and what the judge parses
    assert answer["said"] == str(unavailable) and answer["kind"] == "ReleaseUnavailable"
    assert answer["error"] == f"ReleaseUnavailable: {unavailable}"
    assert str(PolicyRaised(None, KeyError("x"))) == "KeyError: 'x'"  # type: ignore[arg-type]
