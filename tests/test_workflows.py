"""The CI workflow files are valid YAML and call what the README promises."""

from __future__ import annotations

from pathlib import Path

import yaml  # in the test extra

ROOT = Path(__file__).resolve().parents[1]


def load(name: str) -> dict:  # type: ignore[type-arg]
    data = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    assert isinstance(data, dict)
    return data


def steps(workflow: dict) -> list[dict]:  # type: ignore[type-arg]
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def test_ci_runs_the_readme_test_command() -> None:
    workflow = load("ci.yml")
    # PyYAML reads the bare key `on` as True (YAML 1.1); either spelling must carry push.
    triggers = workflow.get("on", workflow.get(True))
    assert "push" in triggers
    assert any(step.get("run", "").strip() == ".ci/run" for step in steps(workflow))
    readme = (ROOT / "README.md").read_text()
    ci_run = (ROOT / ".ci" / "run").read_text()
    assert "python3 -m pip install nox && python3 -m nox\n" in readme
    assert ci_run.rstrip().endswith("python3 -m pip install nox && python3 -m nox")


def test_nightly_restores_fuzzes_and_always_keeps_the_database() -> None:
    workflow = load("nightly.yml")
    triggers = workflow.get("on", workflow.get(True))
    assert "schedule" in triggers
    all_steps = steps(workflow)
    runs = " ".join(step.get("run", "") for step in all_steps)
    assert "nox -s fuzz -- --minutes" in runs
    uploads = [s for s in all_steps if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    database = [s for s in uploads if s["with"]["name"] == "hypothesis-database"]
    assert database and database[0]["if"] == "always()"
    assert any("properties/regressions" in s["with"]["path"] for s in uploads)
    restore = [s for s in all_steps if "download-artifact" in str(s.get("uses", ""))]
    assert restore and restore[0]["with"]["name"] == "hypothesis-database"
