"""TensorRT-LLM through verify's report files and ``report``, on the recorded trees (no download).

One run each, shared by the module (in parallel, so the module waits for the
longest): ``verify --json --junit-xml --markdown`` on the recorded commit,
``report`` on it (the tree named by its absolute path, from the repository
root, so a path that leaks shows) and ``report`` on the tree with the fix's
shape. The recorded commit sizes Whisper-large-v3's cross pool at
``max_input_len`` 1024 for 1500 encoder frames; the fixed tree holds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from crossattn_sizing.core.cross_pool import whisper_large_v3_case
from crossattn_sizing.engine.report_facts import check_args
from crossattn_sizing.engine.tensorrt_llm.report_facts import FACTS, PROPERTY, minimal_case
from crossattn_sizing.engine.tensorrt_llm.sizer import TrtllmCrossPool
from crossattn_sizing.engine.tracker_forms import FORMS
from crossattn_sizing.runs.cross_pool_verify import PROPERTY as VERIFY_PROPERTY
from crossattn_sizing.runs.engine_verdicts import shown_spec, tree_commit
from tests.processes import ROOT, cli, run
from tests.tensorrt_llm_tree import FIXED, RECORDED, UTIL, spec

Done = subprocess.CompletedProcess[str]
SLUG = "tensorrt_llm-cross_pool_capacity-encoder_tokens_fit_the_cross_pool"
"""The report's file stem (engine, property)."""

SIZED_BY_MAX_INPUT_LEN = 1945
"""``max_seq_len = max_input_len``: the recorded commit's line that gives Whisper's cross pool its 1024."""
CAPPED_BY_LIMIT = 1954
"""The fixed shape's ``max_seq_len = encoder_limit`` (1500 for Whisper)."""

ABSOLUTE = re.compile(r"(?:^|[\s`'\"(@=:,\[])/(?:[\w.-]+/)+")
"""A path from the machine's root folder, where a report would show one."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Done, Path]]:
    """The three runs, at the same time: name -> (the run, its folder)."""
    tmp = tmp_path_factory.mktemp("trt")
    argv = {
        "verify": ("verify", "--engine", spec(RECORDED), "--json", str(tmp / "v" / "r.json"),
                   "--junit-xml", str(tmp / "v" / "r.xml"), "--markdown", str(tmp / "v" / "r.md")),
        "report": ("report", "--engine", spec(RECORDED.resolve()), "--out", str(tmp / "report")),
        "fixed": ("report", "--engine", spec(FIXED), "--out", str(tmp / "fixed")),
    }  # fmt: skip
    folders = {"verify": tmp / "v", "report": tmp / "report", "fixed": tmp / "fixed"}
    with ThreadPoolExecutor(max_workers=len(argv)) as pool:
        done = {name: pool.submit(run, cli(*args)) for name, args in argv.items()}
        return {name: (future.result(), folders[name]) for name, future in done.items()}


def shown(done: Done) -> str:
    return done.stdout + done.stderr


def test_verify_writes_json_junit_and_markdown_from_one_verdict(runs: dict[str, Any]) -> None:
    done, folder = runs["verify"]
    assert done.returncode == 1 and "Traceback" not in shown(done), shown(done)
    report = json.loads((folder / "r.json").read_text())
    assert report["exit_status"] == 1 and report["verdict"] == "fails"
    (row,) = report["policies"]
    assert row["policy"] == spec(RECORDED) and row["unexpected"] is True
    (prop,) = row["properties"]
    assert prop["name"] == VERIFY_PROPERTY == PROPERTY and prop["outcome"] == "fails"
    assert prop["examples"] >= 1 and "cross pool: 1500 tokens needed, 1024 held" in prop["diagnosis"]
    assert prop["reproduce"] == whisper_large_v3_case().check_line(spec(RECORDED))
    assert report["database"] is None  # the sizer's property keeps no example database

    suite = ET.parse(folder / "r.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "1" and suite.get("failures") == "1"
    case = suite.find("testcase")
    assert case is not None and case.get("name") == PROPERTY
    failure = case.find("failure")
    assert failure is not None and "1500 tokens needed, 1024 held" in (failure.text or "")

    markdown = (folder / "r.md").read_text()
    assert f"| `{PROPERTY}` | fails |" in markdown and "**fails (UNEXPECTED)**" in markdown
    assert prop["reproduce"] in markdown


def test_report_writes_the_whisper_issue_with_the_trees_line(runs: dict[str, Any]) -> None:
    done, folder = runs["report"]
    assert done.returncode == 1 and "Traceback" not in shown(done), shown(done)
    assert sorted(p.name for p in folder.iterdir()) == [f"{SLUG}.json", f"{SLUG}.md"]
    md = (folder / f"{SLUG}.md").read_text()
    issue = json.loads((folder / f"{SLUG}.json").read_text())
    # The tracker's own bug form sets the prefix (engine/tracker_forms.py).
    prefix = FORMS["tensorrt_llm"].title_prefix
    assert issue["title"].startswith(f"{prefix}Cross-attention KV cache pool is shorter")
    assert "`openai/whisper-large-v3`" in md and "`max_input_len` 1024" in md
    assert "cross pool: 1500 tokens needed, 1024 held" in md
    code = issue["code"]
    assert (code["file"], code["line"]) == (UTIL, SIZED_BY_MAX_INPUT_LEN)
    assert f"`{UTIL}:{SIZED_BY_MAX_INPUT_LEN}`" in md
    lines = (RECORDED / UTIL).read_text().splitlines()
    assert all(q["text"] == lines[q["line"] - 1] for q in code["quoted"])  # from the tree, as numbered
    assert f" {SIZED_BY_MAX_INPUT_LEN}>             max_seq_len = max_input_len" in md
    replay = issue["replay"][-1]
    assert replay.startswith(f"crossattn-sizing check --engine {spec(RECORDED.relative_to(ROOT))} ")


def test_no_report_file_names_a_folder_of_the_machine(runs: dict[str, Any]) -> None:
    """The tree was named by its absolute path: the report shows it relative to where report ran."""
    _, folder = runs["report"]
    for path in folder.iterdir():
        text = path.read_text()
        assert str(ROOT) not in text and str(folder) not in text, path.name
        assert not ABSOLUTE.search(text), f"{path.name}: {ABSOLUTE.search(text)}"


def test_the_fixed_tree_reports_nothing(runs: dict[str, Any]) -> None:
    done, folder = runs["fixed"]
    assert done.returncode == 0, shown(done)
    assert "nothing to report: every property ran and held" in done.stdout
    assert not folder.exists() or not any(folder.iterdir())


def test_the_site_is_the_line_that_ran() -> None:
    """The trace finds the line that set the pool's length on each tree (no report run needed)."""
    case = whisper_large_v3_case()
    assert SIZED_BY_MAX_INPUT_LEN in TrtllmCrossPool(spec(RECORDED)).executed_lines(case)
    assert CAPPED_BY_LIMIT not in TrtllmCrossPool(spec(RECORDED)).executed_lines(case)
    argv = check_args(case.check_line(spec(FIXED)))
    site = FACTS.site(PROPERTY, FIXED, spec(FIXED), argv)
    assert site is not None and site.line == CAPPED_BY_LIMIT


def test_the_minimal_case_in_users_words() -> None:
    lines = minimal_case(check_args(whisper_large_v3_case().check_line("tensorrt_llm@x")))
    assert lines[0].startswith("- model: `openai/whisper-large-v3`")
    assert "`max_source_positions=1500`" in lines[0]
    assert "`max_input_len` 1024, `max_seq_len` 2048" in lines[1] and "1500 encoder tokens" in lines[2]


def test_a_checkout_is_named_by_its_commit_and_a_path_relative_to_here(tmp_path: Path) -> None:
    """A tree at the top of a git checkout is named by its commit (a tree inside another repository,
    as the recorded fixtures are inside this one, is not); a spec's absolute path is shown relative."""
    assert tree_commit(RECORDED) == ""
    checkout = tmp_path / "TensorRT-LLM"
    shutil.copytree(RECORDED, checkout)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-C", str(checkout)]
    for args in (("init", "--quiet"), ("add", "-A"), ("commit", "--quiet", "-m", "recorded")):
        subprocess.run([*git, *args], check=True, capture_output=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout
    assert tree_commit(checkout) == f", git commit {head.strip()}"
    (checkout / UTIL).write_text((checkout / UTIL).read_text() + "\n")
    assert tree_commit(checkout) == f", git commit {head.strip()}, with uncommitted changes"
    # A path under the working folder is shown relative to it; one outside it (this checkout, under the
    # temporary folder) as it is, which the report files then name by its kind (runs/report_files.py).
    inside = Path.cwd() / "trees" / "TensorRT-LLM"
    assert shown_spec(f"tensorrt_llm@{inside}") == f"tensorrt_llm@{os.path.join('trees', 'TensorRT-LLM')}"
    assert shown_spec(f"tensorrt_llm@{checkout}") == f"tensorrt_llm@{checkout}"
    assert shown_spec("vllm==0.24.0") == "vllm==0.24.0"
