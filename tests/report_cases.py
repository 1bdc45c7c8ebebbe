"""The ``report`` worked examples: their command lines, patches, a bisect repository, and the goldens.

Shared by ``tests/test_report.py`` (which asserts them) and by
``python -m tests.report_cases DIR`` (which runs them and rewrites the
golden files under ``tests/golden/`` and the examples in docs/reporting.md
after a deliberate change of the report's structure).

Every tree is a recorded fixture (``tests/fixtures/``): no download.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.engine_tree import build_tree
from tests.processes import ROOT, cli, run
from tests.sglang_tree import FA3, FIXTURE, bounded_copy

GOLDEN = ROOT / "tests" / "golden"
RUNNER = "vllm/v1/worker/gpu/model_runner.py"
PR_46753_OLD = '                getattr(self.model_config.hf_config, "max_source_positions", 0),\n'
PR_46753_NEW = "                self.scheduler_config.max_num_encoder_input_tokens,\n" + PR_46753_OLD
"""PR #46753's one-line change: the scheduler's encoder budget joins the row length's ``max()``."""
AUDIT = ROOT / "reports" / "audit.json"
"""vLLM's release table: ``audit --json`` over 0.19.0 to 0.34.0, each row from the release's own code."""


def diff(rel: str, old: str, new: str) -> str:
    """A ``git diff``-style unified diff of one file (``a/`` and ``b/`` paths relative to the tree)."""
    lines = difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}")
    return "".join(lines)


def sglang_patch(dest: Path) -> Path:
    """The patch bounding both FA3 gathers per request (``tests/sglang_tree.bounded_copy``'s change)."""
    bounded = bounded_copy(dest.with_suffix(".tree"))
    dest.write_text(diff(FA3, (FIXTURE / FA3).read_text(), (bounded / FA3).read_text()))
    return dest


def vllm_tree(root: Path) -> Path:
    """The recorded 0.24.0 model runner as a ``vllm`` package (tests/engine_tree.py)."""
    return build_tree(root, "0.24.0")


def vllm_patch(tree: Path, dest: Path) -> Path:
    """PR #46753's one-line change against ``tree``."""
    old = (tree / RUNNER).read_text()
    assert old.count(PR_46753_OLD) == 1
    dest.write_text(diff(RUNNER, old, old.replace(PR_46753_OLD, PR_46753_NEW)))
    return dest


def report(*args: str, temp: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``crossattn-sizing report ...`` as a user runs it (a fresh process, no network). ``temp``: its
    temporary folder (``TMPDIR``), so the folders of a worked example, made in it, are named ``<tmp>/...``
    in the report wherever the example runs (the suite's private temp folder, or a folder given to
    ``python -m tests.report_cases``)."""
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CROSSATTN_OFFLINE": "1"}
    if temp is not None:
        env["TMPDIR"] = str(temp)
    return run(cli("report", *args), env=env)


def normalise(text: str, paths: dict[str, str]) -> str:
    """The report with the run's folders named by placeholders (``paths``: folder -> placeholder); the
    report already says ``<tmp>`` for the temporary folder, so a folder in it is named as the report names
    it (``<tmp>/pytest-of-.../examples0``) as well as in full."""
    tmp = tempfile.gettempdir()
    named = dict(paths)
    named.update({"<tmp>" + p[len(tmp) :]: n for p, n in paths.items() if p.startswith(tmp + "/")})
    for path, name in sorted(named.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(path, name)
    text = re.sub(r"(?:/tmp|<tmp>)/crossattn-fix-[^/\s`]+/tree", "<patched copy>", text)
    return re.sub(r"(The fields of `[^\n]*\n\n```\n)(.*?)(\n```)", _env_values, text, flags=re.S)


def _env_values(m: re.Match[str]) -> str:
    """The Environment block with each value of this machine (versions, platform) as a placeholder."""
    fields = [line.split(": ", 1)[0] + ": <this run's>" for line in m.group(2).splitlines()]
    return m.group(1) + "\n".join(fields) + m.group(3)


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` with a fixed identity and dates (the commit ids do not depend on the clock)."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout.strip()


BISECT_COMMITS = (
    ("size cross rows with the encoder budget (PR #46753's line)", None),
    ("docs: a note beside the runner", ("NOTES.md", "notes\n")),
    ("drop max_num_encoder_input_tokens from the row length", "defect"),
    ("half-done refactor: the runner does not parse", "broken"),
    ("finish the refactor", "repaired"),
    ("docs: another note", ("NOTES.md", "notes\nmore\n")),
)
"""The bisect repository's history, oldest first: commit 3 introduces the defect; commit 4 cannot run."""
INTRODUCING = 2


def bisect_repo(repo: Path) -> list[str]:
    """A git repository holding the 0.24.0 fixture tree under ``tree/``, committed as
    :data:`BISECT_COMMITS` says; the commit ids, oldest first."""
    tree = vllm_tree(repo / "tree")
    runner = tree / RUNNER
    fixed = runner.read_text().replace(PR_46753_OLD, PR_46753_NEW)
    git(repo, "init", "--quiet", "--initial-branch=main")
    ids = []
    for subject, change in BISECT_COMMITS:
        if change is None or change == "repaired":
            runner.write_text(fixed if change is None else fixed.replace(PR_46753_NEW, PR_46753_OLD))
        elif change == "defect":
            runner.write_text(fixed.replace(PR_46753_NEW, PR_46753_OLD))
        elif change == "broken":
            runner.write_text(runner.read_text() + "\ndef unfinished(:\n")
        else:
            (repo / change[0]).write_text(change[1])
        git(repo, "add", "-A")
        git(repo, "commit", "--quiet", "-m", subject)
        ids.append(git(repo, "rev-parse", "HEAD"))
    return ids


def examples(tmp: Path) -> dict[str, tuple[subprocess.CompletedProcess[str], Path, dict[str, str]]]:
    """Run both worked examples; name -> (the run, its out folder, the paths to normalise).

    The two runs are independent processes (their own trees, patches and out folders), so they run at
    the same time: the suite waits for the longer, not for both one after the other.
    """
    patch = sglang_patch(tmp / "bound-gather.patch")
    tree = vllm_tree(tmp / "vllm-0.24.0")
    vpatch = vllm_patch(tree, tmp / "pr-46753.patch")
    argv = {
        "sglang": ("--engine", f"sglang@{FIXTURE}", "--fix", str(patch), "--out", str(tmp / "sglang")),
        "vllm": ("--engine", f"vllm@{tree}", "-k", "test_coverage", "--release-table", str(AUDIT),
                 "--fix", str(vpatch), "--out", str(tmp / "vllm")),
    }  # fmt: skip
    shown = os.path.relpath(tmp, ROOT)  # report shows a tree's path relative to where it ran (ROOT)
    paths = {
        "sglang": {str(FIXTURE): "tests/fixtures/sglang/0.5.23", str(tmp): "<tmp>", shown: "<tmp>"},
        "vllm": {str(tmp): "<tmp>", shown: "<tmp>", str(ROOT): "."},
    }
    with ThreadPoolExecutor(max_workers=len(argv)) as pool:
        runs = {engine: pool.submit(report, *args, temp=tmp) for engine, args in argv.items()}
        return {engine: (run.result(), tmp / engine, paths[engine]) for engine, run in runs.items()}


def golden_name(engine: str) -> str:
    """The golden file of an engine's worked example."""
    return f"report_{engine}.md"


DOCS = ROOT / "docs" / "reporting.md"


def in_docs(engine: str, golden: str, docs: str) -> str:
    """``docs`` with the engine's worked example (between its markers) set to ``golden``."""
    start, end = f"<!-- golden:{engine} -->\n", f"<!-- /golden:{engine} -->"
    head, _, rest = docs.partition(start)
    _, _, tail = rest.partition(end)
    return f"{head}{start}````markdown\n{golden}````\n{end}{tail}"


if __name__ == "__main__":  # python -m tests.report_cases DIR: rerun the examples, rewrite the goldens
    where = Path(sys.argv[1]).resolve()
    where.mkdir(parents=True, exist_ok=True)
    for engine, (done, folder, paths) in examples(where).items():
        print(done.stdout, done.stderr, sep="\n")
        (md,) = sorted(folder.glob("*.md"))
        golden = normalise(md.read_text(), paths)
        (GOLDEN / golden_name(engine)).write_text(golden)
        DOCS.write_text(in_docs(engine, golden, DOCS.read_text()))
        print(f"wrote {GOLDEN / golden_name(engine)} and its example in {DOCS}")
