"""The report's standalone reproduction, tracker form and path hygiene, on recorded data (no report run).

- ``repro.py`` holds the release's lines verbatim, each block headed by its file:line (SGLang 0.5.23's FA3
  metadata, vLLM 0.24.0's row sizing), and is plain Python a clean interpreter can run;
- the clean interpreter ``report`` runs it in cannot import the harness, Hypothesis or any engine;
- the Markdown follows the tracker's form: its title prefix, a first paragraph without the harness's
  words, a fix upstream said first, the form's sections in order, a refusing release said so;
- no machine path survives :func:`~crossattn_sizing.runs.report_files.scrubbed`, and the pattern that the
  end-to-end test scans report files with catches each kind of machine path (tests/test_report.py runs it
  on every file ``report`` wrote).

The end-to-end runs (the scripts executed in the clean interpreter, IndexError on the release and a clean
run on the patched copy) are tests/test_report.py's, on its module fixture.
"""

from __future__ import annotations

import ast
import tempfile
from pathlib import Path

import pytest

from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.engine.report_facts import excerpt
from crossattn_sizing.engine.sglang import repro as sglang_repro
from crossattn_sizing.engine.sglang.report_facts import FACTS as SGLANG
from crossattn_sizing.engine.sglang.report_facts import READ_SIDE
from crossattn_sizing.engine.tracker_forms import FORMS
from crossattn_sizing.engine.vllm import repro as vllm_repro
from crossattn_sizing.engine.vllm.report_facts import FACTS as VLLM
from crossattn_sizing.findings.results import PropertyResult
from crossattn_sizing.runs.issue_report import IssueReport
from crossattn_sizing.runs.release_table import ReleaseRow, ReleaseTable
from crossattn_sizing.runs.report_files import MACHINE_PATH, places, scrubbed
from crossattn_sizing.runs.standalone import run_standalone
from tests.engine_tree import build_tree
from tests.sglang_tree import FA3, FIXTURE

MINIMAL = [
    "check",
    "--engine",
    "sglang@x",
    "--context-len",
    "1508",
    "--kv-capacity",
    "1508",
    "--requests",
    "1500:1:2,0:12:13",
]
NEMOTRON = [
    "check",
    "--policy",
    "vllm@x",
    "--config",
    '{"groups":[{"block_size":16,"kind":"full"},'
    '{"block_size":16,"kind":"cross"}],"max_model_len":2048,"max_num_batched_tokens":4096}',
    "--encoder-len",
    "3329",
]
HARNESS_WORDS = ("crossattn", "harness", "property", "check line", "shrunk", "verdict", "hypothesis")


def test_sglang_repro_holds_the_release_lines_verbatim_with_file_and_line() -> None:
    text = sglang_repro.script(MINIMAL, FIXTURE, "0.5.23")
    assert text is not None
    ast.parse(text)
    imports = [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert sorted(a.name for n in imports for a in n.names) == ["numpy", "torch"]
    release = (FIXTURE / FA3).read_text().splitlines()
    # The eager gather (1256..1266) and the batch-wide max (901..906) as the release has them.
    for first, last in ((1256, 1266), (901, 906), (997, 997)):
        assert f"# {FA3}:{first}" + (f"-{last}" if last != first else "") in text
        for n in range(first, last + 1):
            assert release[n - 1].strip() in text, (n, release[n - 1])
    assert "ENCODER_LENS = np.array([1500, 0])" in text and "SEQ_LENS = np.array([2, 13])" in text
    sites = SGLANG.sites(FIXTURE)
    assert [s[0].where.split(":")[1] for s in sites] == [
        "901-906",
        "997",
        "1256-1266",
        "3134-3138",
        "3382-3388",
    ]
    marked = {n for _, _, causing in sites for n in causing}
    assert 903 in marked and 1260 in marked  # the batch-wide max and the column built from it


def test_a_tree_without_the_lines_has_no_script(tmp_path: Path) -> None:
    (tmp_path / "sglang").mkdir()
    assert sglang_repro.script(MINIMAL, tmp_path, "0.5.10") is None
    assert excerpt(FIXTURE, FA3, "no such line anywhere") is None


def test_vllm_repro_holds_the_sizing_lines_verbatim(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "t", "0.24.0")
    text = vllm_repro.script(NEMOTRON, tree, "0.24.0")
    assert text is not None
    ast.parse(text)
    runner = (tree / vllm_repro.RUNNER).read_text().splitlines()
    for n in range(409, 417):
        assert runner[n - 1].strip() in text
    assert f"# {vllm_repro.RUNNER}:409-416" in text and "ENCODER_LENS = [3329]" in text


def test_the_clean_interpreter_imports_torch_and_numpy_and_nothing_of_the_harness(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import importlib.util, sys\n"
        "names = ('crossattn_sizing', 'hypothesis', 'pytest', 'sglang', 'vllm', 'tests', 'torch', 'numpy')\n"
        "for name in names:\n"
        "    print(name, importlib.util.find_spec(name) is not None)\n"
        "print('flags', sys.flags.isolated, sys.flags.no_site)\n"
    )
    run = run_standalone(probe)
    assert run.status == 0, run.output
    found = dict(line.split(" ", 1) for line in run.output.splitlines())
    assert found == {
        "crossattn_sizing": "False",
        "hypothesis": "False",
        "pytest": "False",
        "sglang": "False",
        "vllm": "False",
        "tests": "False",
        "torch": "True",
        "numpy": "True",
        "flags": "1 1",
    }
    assert not MACHINE_PATH.search(run.output) and run.command == "python3 -I probe.py"


def _report(facts, form, name: str, release: str, table: ReleaseTable | None = None) -> IssueReport:  # type: ignore[no-untyped-def]
    result = PropertyResult(
        name,
        Outcome.FAILS,
        diagnosis="AssertionError: observed",
        reproduce="crossattn-sizing check --engine x",
    )
    report = IssueReport(
        tracker=facts.tracker,
        spec=f"{facts.engine}=={release}",
        result=result,
        facts=facts.steps(name),
        minimal_case=["- a case"],
        deployed_case=[],
        deployed_line="",
        site=None,
        releases=table,
        releases_note="not computed",
    )
    report.form = form
    report.summary = facts.summary(name, release)
    report.fixed_upstream = facts.fixed_upstream(name, release)
    report.expected = facts.expected(name)
    return report


def _first_paragraph(md: str) -> str:
    blocks = [b for b in md.split("\n\n")[1:] if not b.startswith("**Fixed")]
    return blocks[0]


def test_sglang_issue_follows_its_form() -> None:
    table = ReleaseTable(
        "the check line on each release",
        [
            ReleaseRow("0.5.12.post1", Outcome.HOLDS, "check line"),
            ReleaseRow("0.5.13", Outcome.FAILS, "check line"),
        ],
    )
    report = _report(SGLANG, FORMS["sglang"], READ_SIDE, "0.5.23", table)
    report.refuses = {r.release: SGLANG.refuses(r.release) for r in table.rows if SGLANG.refuses(r.release)}
    md = report.markdown()
    assert md.startswith("# [Bug] FA3 decode metadata reads past a req_to_token row")
    first = _first_paragraph(md)
    assert not any(w in first.lower() for w in HARNESS_WORDS), first
    for said in (
        "Mllama",
        "MossVL",
        "default on Hopper",
        "max_i encoder_lens[i] + max_j seq_lens[j] > context_length + 4",
        "0.5.13",
        "PR #25045",
        "CUDA-graph replay",
    ):
        assert said in first
    headings = [x[3:] for x in md.splitlines() if x.startswith("## ")]
    assert headings == ["Describe the bug", "Reproduction", "Expected and actual behaviour",
                        "Where in the code", "Affected releases", "How this was found"]  # fmt: skip
    report.environment = [("Python", "3.11"), ("sglang", "0.5.23")]
    with_env = [x[3:] for x in report.markdown().splitlines() if x.startswith("## ")]
    assert with_env[:3] == ["Describe the bug", "Reproduction", "Environment"]
    assert "```\nPython: 3.11\nsglang: 0.5.23\n```" in report.markdown()
    assert "| 0.5.12.post1 | holds | check line; refuses such a batch: the decode path asserts" in md
    assert "| 0.5.13 | fails | check line |" in md
    assert "- [ ] The bug persists in the latest version." in md


def test_vllm_0_24_issue_says_fixed_in_0_25_first() -> None:
    md = _report(VLLM, FORMS["vllm"], "test_capacity::test_coverage", "0.24.0").markdown()
    lines = md.splitlines()
    assert lines[0].startswith("# [Bug]: ModelRunner V2 cross-attention block table too short")
    assert lines[2].startswith("**Fixed in 0.25.0 by PR #46753")
    assert not any(w in _first_paragraph(md).lower() for w in HARNESS_WORDS)
    assert not _report(VLLM, FORMS["vllm"], "test_capacity::test_coverage", "0.25.0").fixed_upstream


@pytest.mark.parametrize(
    "path",
    [
        "/tmp/pytest-of-x/out",
        "/root/.cache/crossattn-sizing/wheels",
        "/work/wt-repro/tests",
        "/home/someone/tree",
        "~/.cache/x",
    ],
)
def test_the_scan_catches_each_kind_of_machine_path_and_scrubbing_removes_it(path: str) -> None:
    assert MACHINE_PATH.search(f"see `{path}` here")
    where = places(None)
    assert not MACHINE_PATH.search(scrubbed(f"{tempfile.gettempdir()}/x and {Path.cwd()}/tests", where))
    assert scrubbed({"a": [f"{Path.cwd()}/tests/x"]}, where) == {"a": ["tests/x"]}
    assert not MACHINE_PATH.search("sglang@tests/fixtures/sglang/0.5.23 <tmp>/vllm-0.24.0 <cache>/wheels")
