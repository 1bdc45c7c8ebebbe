"""How the suite finds the properties and reads their outcomes back: as values, not printed text."""

from __future__ import annotations

from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from crossattn_sizing.base.errors import HarnessError
from crossattn_sizing.base.settings import PROPERTIES
from crossattn_sizing.findings.results import (
    PropertyFailure,
    PropertyResult,
    could_not_judge,
    event_counts,
    first_failure,
)
from crossattn_sizing.runs import suite
from crossattn_sizing.runs.pytest_plugin import SUITE_PACKAGE

ROOT = Path(__file__).resolve().parents[1]


def test_a_clone_runs_its_own_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROPERTIES, raising=False)
    assert suite.clone_suite() == ROOT / "properties"  # the tests run from this tree's src/
    assert suite.properties_dir() == ROOT / "properties"


def test_an_install_runs_the_suite_its_wheel_holds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Outside a clone, the suite is the package's own ``crossattn_sizing.properties``, found by name."""
    installed = tmp_path / "site-packages" / "crossattn_sizing" / "properties"
    installed.mkdir(parents=True)
    (installed / suite.SUITE_MARK).write_text("")
    specs = {SUITE_PACKAGE: ModuleSpec(SUITE_PACKAGE, None, is_package=True)}
    specs[SUITE_PACKAGE].submodule_search_locations = [str(installed)]
    monkeypatch.delenv(PROPERTIES, raising=False)
    monkeypatch.setattr(suite, "clone_suite", lambda: None)
    monkeypatch.setattr(suite.importlib.util, "find_spec", specs.get)
    assert suite.properties_dir() == installed


def test_an_install_without_the_suite_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROPERTIES, raising=False)
    monkeypatch.setattr(suite, "clone_suite", lambda: None)
    monkeypatch.setattr(suite.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(HarnessError, match=r"lacks crossattn_sizing.properties.*CROSSATTN_PROPERTIES"):
        suite.properties_dir()


def test_the_variable_wins_and_a_folder_that_is_no_suite_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(PROPERTIES, str(tmp_path))
    with pytest.raises(HarnessError, match=f"CROSSATTN_PROPERTIES={tmp_path}: is not the property suite"):
        suite.properties_dir()
    (tmp_path / suite.SUITE_MARK).write_text("")
    assert suite.properties_dir() == tmp_path


def test_a_property_failure_carries_its_fields_and_prints_both() -> None:
    exc = PropertyFailure("coverage fails", "crossattn-sizing check --policy x")
    assert str(exc) == "coverage fails\n  reproduce: crossattn-sizing check --policy x"
    result = PropertyResult("p")
    result.fail(exc, "ignored crash line", "prop(case=...)", "@reproduce_failure('v', b'x')")
    assert (result.outcome, result.diagnosis, result.reproduce) == ("fails", "coverage fails", exc.reproduce)
    assert result.replay_lines() == ["  reproduce: crossattn-sizing check --policy x"]


def test_a_rerun_line_keeps_hypothesis_replay_beside_it() -> None:
    """A property with no command for its case reruns its test; the example and blob still show."""
    exc = PropertyFailure("slots differ", "pytest 'properties/x.py::t' --impl torch", reruns_test=True)
    result = PropertyResult("p")
    result.fail(exc, "crash line", "prop(x=1)", "@reproduce_failure('v', b'x')")
    assert result.replay_lines() == [
        "  reproduce: pytest 'properties/x.py::t' --impl torch",
        "  shrunk example: prop(x=1)",
        "  replay it with: @reproduce_failure('v', b'x')",
    ]
    merged = PropertyResult("p")
    merged.merge(result)
    assert merged.replay_lines() == result.replay_lines()


def test_any_other_failure_is_named_with_hypothesis_replay() -> None:
    result = PropertyResult("p")
    result.fail(ValueError("bad slot"), "crash line", "prop(x=1)", "@reproduce_failure('v', b'x')")
    assert result.diagnosis == "ValueError: bad slot"
    assert result.replay_lines() == [
        "  shrunk example: prop(x=1)", "  replay it with: @reproduce_failure('v', b'x')",
    ]  # fmt: skip
    result = PropertyResult("q")
    result.fail(None, "teardown crashed", "", "")
    assert result.diagnosis == "teardown crashed" and result.replay_lines() == []


def test_exception_groups_give_their_first_leaf() -> None:
    class Group(Exception):  # the shape of an exception group on any Python
        def __init__(self, *inner: BaseException) -> None:
            self.exceptions = inner

    leaf = PropertyFailure("first")
    assert first_failure(Group(Group(leaf), ValueError())) is leaf
    assert first_failure(leaf) is leaf


def test_observations_count_examples_events_and_targets() -> None:
    result = PropertyResult("p")
    result.observe("passed", "during generate phase", "generate", {"cell": "E set", "target:slack": 3.0})
    result.observe("passed", "explicit example", None, {"cell": "E set", "target:slack": 7.0})
    result.observe("gave_up", "during generate phase", "generate", {"cell": "rejected"})
    result.observe("failed", "during reuse phase", "reuse", {"plain": ""})
    result.observe("failed", "minimal failing test case", None, {"plain": ""})  # a replay, not a new example
    assert result.examples == 3
    assert result.events == {"cell: E set": 2, "plain": 1}
    assert result.best_targets == {"slack": 7.0}
    assert result.replayed == 1
    assert event_counts({"target": 1.5}) == ({}, {"": 1.5})


def test_a_run_reads_failures_and_statistics_as_values() -> None:
    """End to end on the real suite: one failing capacity property, its fields as the property wrote them."""
    results, code = suite.run_suite("mrv2-prefix", select=["test_capacity and coverage"])
    (coverage,) = [r for r in results if r.name == "test_capacity::test_coverage"]
    assert code == 1 and coverage.outcome == "fails"
    assert coverage.diagnosis.startswith("coverage fails under sizing policy 'mrv2-prefix'")
    assert "reproduce:" not in coverage.diagnosis
    assert coverage.reproduce.startswith("crossattn-sizing check --policy mrv2-prefix --config ")
    assert "encoder_lens=(3329,)" in coverage.falsifying_example  # the pinned Nemotron-Parse page
    assert coverage.examples >= 1


def test_a_test_hypothesis_could_not_feed_is_not_run_never_a_failure() -> None:
    """A filtering health check (an engine discarding what its release cannot represent) judged nothing."""
    from hypothesis.errors import FailedHealthCheck, Unsatisfiable

    assert could_not_judge(FailedHealthCheck("It looks like this test is filtering out a lot of inputs."))
    assert could_not_judge(Unsatisfiable("Unable to satisfy assumptions")).startswith(
        "Hypothesis could not generate enough accepted examples (Unsatisfiable: "
    )
    assert could_not_judge(PropertyFailure("coverage fails")) == "" and could_not_judge(None) == ""
    result = PropertyResult("p", outcome="holds")  # another parametrization held
    result.unjudged = could_not_judge(FailedHealthCheck("filtering"))
    result.finish()
    assert result.outcome == "not run" and "FailedHealthCheck: filtering" in result.reason
    failed = PropertyResult("q", outcome="fails", unjudged="x")
    failed.finish()
    assert failed.outcome == "fails"  # a failure elsewhere in the property still decides


def test_a_share_of_the_files_that_k_empties_is_left_to_the_caller() -> None:
    """verify splits the files between processes: ``-k test_coverage`` selects nothing in
    test_slot_mapping.py, and that share is not "a suite that holds no test" (verify judges the
    whole and refuses a ``-k`` that selects nothing anywhere). Seen: ``verify -k test_capacity``
    exited 2 once the empty-suite check met the split."""
    results, code = suite.run_suite(
        "mrv2", select=["test_coverage"], only=["properties/test_slot_mapping.py"], allow_empty=True
    )
    assert results == [] and code == pytest.ExitCode.NO_TESTS_COLLECTED
    with pytest.raises(HarnessError, match="selects no property"):
        suite.run_suite("mrv2", select=["test_coverage"], only=["properties/test_slot_mapping.py"])
