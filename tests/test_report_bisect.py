"""``report --bisect GOOD..BAD``: the range's ends run first; any revision git accepts; one line otherwise.

- :func:`commit_range` resolves each end with git itself: a tag with dots, a branch with a slash and
  dots, a sha prefix, ``HEAD~N``; three dots, an unknown name, an option-like name, a tree, a reversed
  or empty range are each one line naming the rule;
- end to end on the bisect repository (``tests/report_cases.bisect_repo``), held-out variants of issue
  45's case (a GOOD that already fails was trusted, and git named GOOD's child): a GOOD that fails named
  by a dotted tag, a BAD that holds named by ``HEAD~N``, a GOOD that cannot run named by a sha prefix.
  Each names no commit, says why in one line, still writes the report (exit 1: the property fails on
  the tree), runs only the two ends, names no temporary folder, and leaves the repository as it was.
"""

from __future__ import annotations

import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from crossattn_sizing.base.errors import OptionError
from crossattn_sizing.runs.bisect import commit_range
from tests import report_cases as rc

pytest.importorskip("transformers", reason="the 'hf' extra is not installed")


def small_repo(repo: Path) -> list[str]:
    """Four empty commits, tags ``v0.6`` and ``release-0.4``, a branch ``fix/rows.v2``; the ids, oldest
    first."""
    repo.mkdir()
    rc.git(repo, "init", "--quiet", "--initial-branch=main")
    ids = []
    for n in range(4):
        rc.git(repo, "commit", "--quiet", "--allow-empty", "-m", f"commit {n}")
        ids.append(rc.git(repo, "rev-parse", "HEAD"))
    rc.git(repo, "tag", "release-0.4", ids[0])
    rc.git(repo, "tag", "-a", "v0.6", "-m", "an annotated tag", ids[2])
    rc.git(repo, "branch", "fix/rows.v2", ids[3])
    return ids


@pytest.mark.parametrize(
    ("text", "good", "bad", "count"),
    [
        ("release-0.4..v0.6", 0, 2, 2),
        ("v0.6..fix/rows.v2", 2, 3, 1),
        ("HEAD~3..HEAD~1", 0, 2, 2),
        ("{sha}..main", 1, 3, 2),
    ],
)
def test_any_revision_git_accepts_is_an_end(
    tmp_path: Path, text: str, good: int, bad: int, count: int
) -> None:
    ids = small_repo(tmp_path / "repo")
    span = commit_range(tmp_path / "repo", text.format(sha=ids[1][:9]))
    assert (span.good, span.bad, span.commits) == (ids[good], ids[bad], count)
    assert f"{span.good_name}..{span.bad_name}" == text.format(sha=ids[1][:9])


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("v0.6...main", "must be GOOD..BAD (two revisions of the checkout, two dots)"),
        ("..main", "must be GOOD..BAD"),
        ("v0.7..main", "v0.7 is not a commit of"),
        ("--output=x..main", "--output=x is not a commit of"),
        ("HEAD^{tree}..main", "HEAD^{tree} is not a commit of"),
        ("main..release-0.4", "main is not an ancestor of release-0.4"),
        ("v0.6..v0.6", "the range holds no commit"),
    ],
)
def test_a_range_git_does_not_resolve_is_one_line(tmp_path: Path, text: str, says: str) -> None:
    small_repo(tmp_path / "repo")
    with pytest.raises(OptionError) as caught:
        commit_range(tmp_path / "repo", text)
    line = str(caught.value)
    assert says in line and "\n" not in line and line.startswith(f"--bisect {text}: ")


ENDS = {
    # name -> (range, the end that is wrong, what the line says of it)
    "good fails": ("v0.6..release/0.8", "GOOD `v0.6`", "already fails the check line"),
    "bad holds": ("HEAD~5..HEAD~4", "BAD `HEAD~4`", "holds (the check line does not fail there)"),
    "good cannot run": ("{broken}..HEAD", "GOOD `{broken}`", "could not be checked (vllm@"),
}


def leftovers() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("crossattn-bisect-*")}


@pytest.fixture(scope="module")
def ends(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Each range of :data:`ENDS` reported on one bisect repository (the runs at once: each its own
    process, clone and out folder), with the repository's state and the temporary folders before."""
    repo = tmp_path_factory.mktemp("ends") / "repo"
    ids = rc.bisect_repo(repo)
    rc.git(repo, "tag", "v0.6", ids[rc.INTRODUCING])  # already fails
    rc.git(repo, "branch", "release/0.8", ids[-1])
    before = rc.git(repo, "rev-parse", "HEAD"), rc.git(repo, "status", "--porcelain"), leftovers()
    broken = ids[3][:9]  # the commit whose runner does not parse

    def one(name: str) -> tuple[object, Path]:
        out = repo.parent / name.replace(" ", "-")
        span = ENDS[name][0].format(broken=broken)
        done = rc.report("--engine", f"vllm@{repo / 'tree'}", "-k", "test_coverage", "--bisect", span,
                         "--out", str(out))  # fmt: skip
        return done, out

    with ThreadPoolExecutor(max_workers=len(ENDS)) as pool:
        runs = {name: pool.submit(one, name) for name in ENDS}
        done = {name: run.result() for name, run in runs.items()}
    return repo, ids, broken, before, done


@pytest.mark.parametrize("name", list(ENDS))
def test_an_end_that_is_not_what_the_range_claims_names_no_commit(ends, name: str) -> None:  # type: ignore[no-untyped-def]
    _repo, _ids, broken, _before, done = ends
    run, out = done[name]
    assert run.returncode == 1, run.stdout + run.stderr  # the property fails on the tree: the report
    _, wrong, says = ENDS[name]
    wrong = wrong.format(broken=broken)
    lines = [x for x in run.stdout.splitlines() if x.startswith("bisect: no first bad commit named")]
    assert len(lines) == 1 and wrong in lines[0] and says in lines[0], run.stdout
    data = json.loads(next(out.glob("*.json")).read_text())
    found = data["first_bad_commit"]
    assert found["first_bad_commit"] is None and wrong in found["why_none"] and says in found["why_none"]
    assert found["runs"] == 2  # the two ends, nothing bisected
    md = next(out.glob("*.md")).read_text()
    assert "No first bad commit named among the " in md and wrong in md
    assert "crossattn-bisect-" not in run.stdout + run.stderr + md  # the clone is never named


def test_the_repository_and_the_temp_folder_are_left_as_they_were(ends) -> None:  # type: ignore[no-untyped-def]
    repo, _ids, _broken, (head, status, temps), _done = ends
    assert rc.git(repo, "rev-parse", "HEAD") == head and rc.git(repo, "status", "--porcelain") == status
    assert len(rc.git(repo, "worktree", "list").splitlines()) == 1
    assert not (repo / ".git" / "BISECT_LOG").exists()
    assert leftovers() == temps
