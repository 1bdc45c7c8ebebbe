"""The CI workflow files are valid YAML and call what the README promises."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
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


VERIFY_STEP = "The tree's sizing and kernels under the properties"
CACHE_STEPS = (
    "Restore the example database and the engine cache",
    "Keep the example database and the engine cache",
)
INSTALL_STEP = "Install the harness (the CPU build of torch first; this repository's wheel)"
RECIPE_VERIFY = "crossattn-sizing verify --policy vllm@. --impl vllm@. --junit-xml "


def ci_recipe() -> dict:  # type: ignore[type-arg]
    """The job docs/ci.md gives a vLLM fork (the document's one YAML block)."""
    text = (ROOT / "docs" / "ci.md").read_text()
    data = yaml.safe_load(text.split("```yaml\n", 1)[1].split("```", 1)[0])
    assert isinstance(data, dict)
    return data


def recipe_differences(doc_job: dict, repo_job: dict) -> list[str]:  # type: ignore[type-arg]
    """Where the repository's CI job stops being the document's recipe (the tree is its ``tree/``)."""
    problems = []
    if repo_job["env"] != doc_job["env"]:
        problems.append(f"env: {repo_job['env']} != {doc_job['env']}")
    doc = {step.get("name"): step for step in doc_job["steps"]}
    repo = {step.get("name"): step for step in repo_job["steps"]}
    verify = repo[VERIFY_STEP]
    if verify["run"] != doc[VERIFY_STEP]["run"] or verify.get("working-directory") != "tree":
        problems.append(f"the verify step differs: {repo[VERIFY_STEP]} vs {doc[VERIFY_STEP]}")
    for name in CACHE_STEPS:
        ours, theirs = repo[name]["with"], doc[name]["with"]
        paths = [p if p.startswith("~") else f"tree/{p}" for p in theirs["path"].split()]
        same_action = repo[name]["uses"] == doc[name]["uses"]
        if ours["path"].split() != paths or ours["key"] != theirs["key"] or not same_action:
            problems.append(f"{name}: {ours} vs {theirs}")
    order = [step.get("name") for step in repo_job["steps"]]
    if not order.index(CACHE_STEPS[0]) < order.index(VERIFY_STEP) < order.index(CACHE_STEPS[1]):
        problems.append(f"the cache is not restored before verify and kept after it: {order}")
    if repo[CACHE_STEPS[1]].get("if") != "always()":
        problems.append("the database is not kept when verify fails")
    install = [line for line in doc_job["steps"][3]["run"].splitlines() if "torch==" in line]
    if not install or install[0] not in repo[INSTALL_STEP]["run"]:
        problems.append("the CPU torch line differs")
    return problems


def test_the_ci_recipe_is_the_command_a_fork_needs() -> None:
    job = ci_recipe()["jobs"]["sizing"]
    steps = {step.get("name"): step for step in job["steps"]}
    assert steps[VERIFY_STEP]["run"].startswith(RECIPE_VERIFY)
    assert "pip install 'crossattn-sizing[all]'" in job["steps"][3]["run"]
    assert job["env"]["CROSSATTN_DB"] in steps[CACHE_STEPS[0]]["with"]["path"]


def test_the_ci_job_runs_the_recipe_as_written() -> None:
    repo = load("ci.yml")["jobs"]["engine-recipe"]
    assert recipe_differences(ci_recipe()["jobs"]["sizing"], repo) == []


def test_a_recipe_that_drifted_from_the_ci_job_is_told() -> None:
    """Meta-test: the comparison sees a changed command, a changed cache path and a changed variable."""
    repo = load("ci.yml")["jobs"]["engine-recipe"]
    for change in ("command", "path", "env"):
        doc = ci_recipe()["jobs"]["sizing"]
        steps = {step.get("name"): step for step in doc["steps"]}
        if change == "command":
            steps[VERIFY_STEP]["run"] = steps[VERIFY_STEP]["run"].replace("--impl vllm@.", "--impl torch")
        elif change == "path":
            steps[CACHE_STEPS[1]]["with"]["path"] = "elsewhere"
        else:
            doc["env"]["CROSSATTN_ENGINE_EXAMPLES"] = "3"
        assert recipe_differences(doc, repo) != [], change


def test_ci_has_a_package_job() -> None:
    """The wheel as a user installs it is built and run on every push (``nox -s package``)."""
    job = load("ci.yml")["jobs"]["package"]
    assert any("nox -s package" in step.get("run", "") for step in job["steps"])


@pytest.mark.slow
def test_the_recipe_verify_uses_the_profile_and_the_database_it_names(tmp_path: Path) -> None:
    """docs/ci.md's job, its variables and its verify line as written, from a vLLM tree's folder, and
    what that verify reports as its profile and its example database: the ones the recipe names.

    Added to the line, only what makes it short and readable here: ``-k test_capacity`` (the
    recipe's own way to judge only the tree's sizing), one example, and ``--json`` to read the report.
    """
    from tests.engine_tree import build_tree

    job = ci_recipe()["jobs"]["sizing"]
    named = {str(k): str(v) for k, v in job["env"].items()}
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSATTN_")}
    env.update(named)
    line = {step.get("name"): step for step in job["steps"]}[VERIFY_STEP]["run"]
    argv = shlex.split(line)
    assert argv[:2] == ["crossattn-sizing", "verify"]
    build_tree(tmp_path, "0.25.0", kernels=True)
    out = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "crossattn_sizing", *argv[1:], "-k", "test_capacity", "--max-examples", "1",
         "--json", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    said = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode in (0, 1, 3) and out.exists(), said  # a verdict, whatever it is: not bad input
    report = json.loads(out.read_text())
    assert report["profile"] == named["CROSSATTN_PROFILE"] == "dev", said
    assert report["database"] == named["CROSSATTN_DB"], said
