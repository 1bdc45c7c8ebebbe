"""``report --fix PATCH`` with a patch that applies but leaves the copy unloadable, and the release
table's headline when nothing in it ran.

- :func:`unloadable` names a patched file that does not parse as ``path/in/tree.py:LINE`` (compiled,
  never run), and any other load error with the temporary copy's path taken out;
- end to end, a held-out variant of issue 45's case (there a syntax error: exit 2 naming the temporary
  copy, no report): a patch to the 0.24.0 tree that imports a name the tree does not have. The fix is
  "not run", said once with the file in the tree's terms; the report is still written (exit 1); no
  temporary path is printed or written; the tree and the temporary folder are left as they were;
- a table whose only release did not run says that no release was judged, never "none fails".
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.runs.patched_tree import patched_copy, unloadable
from crossattn_sizing.runs.release_table import ReleaseRow, ReleaseTable
from tests import report_cases as rc

pytest.importorskip("transformers", reason="the 'hf' extra is not installed")

BLOCK_TABLE = "vllm/v1/worker/gpu/block_table.py"
BROKEN_IMPORT = "from vllm.utils.math_utils import no_such_helper\n"


def leftovers() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("crossattn-fix-*")}


def tree_and_patch(tmp: Path, new: str) -> tuple[Path, Path]:
    """A one-file tree (``pkg/mod.py``) and a ``git diff`` patch that makes the file ``new``."""
    tree = tmp / "tree"
    (tree / "pkg").mkdir(parents=True)
    old = "import os\n\n\ndef f():\n    return os.sep\n"
    (tree / "pkg" / "mod.py").write_text(old)
    patch = tmp / "change.patch"
    patch.write_text(rc.diff("pkg/mod.py", old, new))
    return tree, patch


def test_a_patched_file_that_does_not_parse_is_named_by_its_line_in_the_tree(tmp_path: Path) -> None:
    tree, patch = tree_and_patch(tmp_path, "import os\n\n\ndef f(:\n    return os.sep\n")
    with patched_copy(tree, patch, f"vllm@{tree}") as copy:
        why = unloadable(copy, patch, f"vllm@{tree}", RuntimeError(f"{copy}/pkg/mod.py: cannot load"))
    assert why.startswith("pkg/mod.py:4: SyntaxError: ") and str(copy) not in why


def test_any_other_load_error_is_said_without_the_temporary_copy(tmp_path: Path) -> None:
    tree, patch = tree_and_patch(tmp_path, "from pkg.util import gone\n" + "import os\n")
    spec = f"vllm@{tree}"
    with patched_copy(tree, patch, spec) as copy:
        error = RuntimeError(f"vllm@{copy} does not import on this machine: ImportError: cannot import "
                             f"name 'gone' from 'pkg.util' ({copy}/pkg/util.py)\nmore")  # fmt: skip
        why = unloadable(copy, patch, spec, error)
    assert why == (f"the patched copy of {spec} does not import on this machine: ImportError: cannot import "
                   "name 'gone' from 'pkg.util' (pkg/util.py)")  # fmt: skip


@pytest.fixture(scope="module")
def unloadable_fix(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """``report --fix`` on the 0.24.0 tree with a patch importing a name the tree lacks."""
    tmp = tmp_path_factory.mktemp("fix")
    tree = rc.vllm_tree(tmp / "vllm-0.24.0")
    old = (tree / BLOCK_TABLE).read_text()
    lines = old.splitlines(True)
    first = next(n for n, line in enumerate(lines) if line.startswith(("import ", "from ")))
    patch = tmp / "helper.patch"
    patch.write_text(rc.diff(BLOCK_TABLE, old, "".join([*lines[:first], BROKEN_IMPORT, *lines[first:]])))
    before = sorted((p.relative_to(tree), p.read_bytes()) for p in tree.rglob("*.py")), leftovers()
    done = rc.report("--engine", f"vllm@{tree}", "-k", "test_coverage", "--fix", str(patch), "--out",
                     str(tmp / "out"))  # fmt: skip
    after = sorted((p.relative_to(tree), p.read_bytes()) for p in tree.rglob("*.py")), leftovers()
    return done, tmp / "out", tree, before, after


def test_a_fix_whose_copy_does_not_load_is_not_run_and_the_report_is_written(unloadable_fix) -> None:  # type: ignore[no-untyped-def]
    done, out, tree, _before, _after = unloadable_fix
    assert done.returncode == 1, done.stdout + done.stderr
    said = [x for x in done.stdout.splitlines() if "the patched copy does not load" in x]
    assert len(said) == 1 and "cannot import name 'no_such_helper'" in said[0], done.stdout
    assert "vllm/utils/math_utils.py" in said[0] and said[0].endswith("the fix is not checked")
    data = json.loads(next(out.glob("*.json")).read_text())
    fix = data["checked_fix"]
    assert "no_such_helper" in fix["not_checked"]
    assert fix["properties"] == [
        {"property": "test_capacity::test_coverage", "before": "fails", "after": "not run"}
    ]
    assert fix["replays"] == {"test_capacity::test_coverage": "not run"}
    md = next(out.glob("*.md")).read_text()
    assert "but the fix was not checked: the patched copy does not load (" in md
    assert "| `test_capacity::test_coverage` | fails | not run |" in md
    assert "crossattn-fix-" not in done.stdout + done.stderr + md + json.dumps(data)
    # The report names no machine path: the tree, in the temporary folder, is named under <tmp>.
    temp = tempfile.gettempdir()  # a tree outside the temporary folder and the working one is "<tree>"
    shown = "<tmp>" + str(tree)[len(temp) :] if str(tree).startswith(temp + "/") else "<tree>"
    assert f"the patched copy of vllm@{shown}" in fix["not_checked"] and str(tree) not in json.dumps(data)


def test_the_tree_and_the_temp_folder_are_left_as_they_were(unloadable_fix) -> None:  # type: ignore[no-untyped-def]
    _done, _out, _tree, before, after = unloadable_fix
    assert after == before


def test_a_table_where_nothing_ran_says_no_release_was_judged() -> None:
    only = ReleaseTable("t", [ReleaseRow("0.5.10", Outcome.NOT_RUN, "not run: no wheel")])
    assert only.headline() == "No release was judged: none of the table's releases ran here (0.5.10)."
    assert ReleaseTable("t", []).headline() == "No release was judged: the table is empty."
    some = ReleaseTable(
        "t", [ReleaseRow("0.5.10", Outcome.NOT_RUN, "x"), ReleaseRow("0.5.11", Outcome.HOLDS, "")]
    )
    assert some.headline() == (
        "No release in the table fails among those that ran. "
        "Releases not judged (they did not run here): 0.5.10."
    )
    held = ReleaseTable("t", [ReleaseRow("0.5.11", Outcome.HOLDS, "y")])
    assert held.headline() == "No release in the table fails."
    rows = [
        ("1.0", Outcome.NOT_RUN),
        ("1.1", Outcome.FAILS),
        ("1.2", Outcome.NOT_RUN),
        ("1.3", Outcome.HOLDS),
    ]
    bad = ReleaseTable("t", [ReleaseRow(release, verdict, "") for release, verdict in rows])
    assert bad.headline() == (
        "First release with the defect: **1.1**; last: **1.1**; first release without it after that: 1.3. "
        "Earlier releases not judged (they did not run here): 1.0."
    )
