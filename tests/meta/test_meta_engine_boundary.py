"""Meta-tests of the verdict boundary (issue 36, item 4): what the harness's own adapter cannot run is
"not run" (exit 3), never "fails", and the line names the release, the piece and the engine's file and line.

Each tree is the recorded SGLang 0.5.23 (tests/fixtures/sglang/0.5.23) with one change that breaks the
adapter, not the release's sizing or gather: a step reaches a stand-in and subscripts it, iterates it,
does arithmetic with it or tests its truth; a function the harness runs is renamed; a class's method
is renamed; a signature the harness calls changes. The unchanged tree fails the read side on the same
batch (a judged observation) on both paths, so each "not run" below is the boundary at work on the
path the change breaks, not a batch that never reaches the gather.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crossattn_sizing.commands.cli import main
from tests.sglang_tree import FA3, SPEC, copy_tree

pytest.importorskip("transformers", reason="the 'hf' extra is not installed")

ISSUE = [(6404, 20, 21), (0, 3000, 3001)]
ALLOCATION = "sglang/srt/mem_cache/allocation.py"
MEMORY_POOL = "sglang/srt/mem_cache/memory_pool.py"
DOC = '        """Initialize forward metadata hence all layers in the forward pass can reuse it."""\n'
FIRST_LINE = DOC + "        metadata = FlashAttentionMetadata()\n"  # init_forward_metadata's line 892


def _stand_in_use(expression: str) -> tuple[str, tuple[str, str]]:
    """The eager step's first line also does ``expression`` with ``get_exec`` (an import with no stand-in)."""
    return FA3, (FIRST_LINE, f"{DOC}        metadata = FlashAttentionMetadata(); _ = {expression}\n")


CHANGES = {
    "subscript": (_stand_in_use("get_exec[0]"), "get_exec", "subscripted", f"{FA3}:892"),
    "iteration": (_stand_in_use("list(get_exec)"), "get_exec", "iterated", f"{FA3}:892"),
    "arithmetic": (_stand_in_use("get_exec + 1"), "get_exec", "arithmetic", f"{FA3}:892"),
    "truth": (_stand_in_use("bool(get_exec)"), "get_exec", "tested for truth", f"{FA3}:892"),
    "function renamed": (
        (ALLOCATION, ("def alloc_for_decode_default(batch", "def alloc_for_decode_renamed(batch")),
        "alloc_for_decode_default", "renamed or moved", ALLOCATION,
    ),
    "method renamed": (
        (FA3, ("    def init_forward_metadata(self, forward_batch: ForwardBatch):\n",
               "    def init_forward_metadata_gone(self, forward_batch: ForwardBatch):\n")),
        "FlashAttentionBackend.init_forward_metadata", "lacks init_forward_metadata", FA3,
    ),
    "signature changed": (
        (MEMORY_POOL, ("        enable_memory_saver: bool,\n    ):\n",
                       "        enable_memory_saver: bool,\n        new_required_argument: int,\n    ):\n")),
        "ReqToTokenPool", "new_required_argument", "",
    ),
}  # fmt: skip


def test_the_unchanged_tree_fails_on_this_batch() -> None:
    """The control: on the batch below, the recorded release's gather is judged and fails."""
    from crossattn_sizing.engine.sglang.client import SglangReads

    kind, line = SglangReads(SPEC).first_problem(8192, ISSUE)
    assert kind == "fails" and "column 8196" in line


@pytest.mark.parametrize("case", list(CHANGES))
def test_an_adapter_gap_is_not_run_naming_release_piece_and_line(case: str, tmp_path: Path) -> None:
    from crossattn_sizing.engine.sglang.client import SglangReads

    (rel, change), piece, says, where = CHANGES[case]
    tree = copy_tree(tmp_path / "t", {rel: change})
    spec = f"sglang@{tree}"
    verdicts = SglangReads(spec).verdicts(8192, ISSUE)
    broken = ("eager",) if rel == FA3 and change[0] == FIRST_LINE else ("eager", "replay")
    for path in broken:  # unchanged, this path fails on this batch; broken, it is not run
        assert verdicts[path]["verdict"] == "not run", verdicts[path]
        reason = verdicts[path]["reason"]
        assert piece in reason and says in reason and where in verdicts[path]["where"], reason
    kind, line = SglangReads(spec).first_problem(8192, ISSUE)
    if broken == ("eager",):  # replay still runs and reads past the row: a failure comes before a "not run"
        assert kind == "fails" and "column 8196" in line, line
    else:
        assert kind == "not run" and spec in line, line  # the first path's line names the release


@pytest.mark.parametrize("case", ["subscript", "function renamed"])
def test_check_on_an_adapter_gap_exits_3_in_one_line_per_path(case: str, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    (rel, change), piece, _says, _where = CHANGES[case]
    tree = copy_tree(tmp_path / "t", {rel: change})
    code = main(["check", "--engine", f"sglang@{tree}", "--context-len", "8192", "--kv-capacity", "32768",
                 "--requests", "6404:20:21,0:1000:1001"])  # fmt: skip (a batch the unchanged tree holds on)
    out, err = capsys.readouterr()
    assert code == 3, out + err
    assert "FAIL" not in out and "Traceback" not in out + err
    assert any(line.startswith("NOT RUN") and piece in line for line in out.splitlines()), out


def test_verify_on_an_adapter_gap_is_not_run_never_holds(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The whole pipeline: a release the adapter cannot run gives the read side "not run" (not "n/a",
    which would let the row hold) and exit 3, never "holds" and never "fails"."""
    import json

    (rel, change), *_ = CHANGES["function renamed"]
    tree = copy_tree(tmp_path / "t", {rel: change})
    out = tmp_path / "v.json"
    code = main(["verify", "--engine", f"sglang@{tree}", "--max-examples", "3", "--seed", "1",
                 "--json", str(out)])  # fmt: skip
    capsys.readouterr()
    data = json.loads(out.read_text())
    outcomes = {p["name"].split("::")[-1]: p for p in data["policies"][0]["properties"]}
    read = outcomes["test_gathers_stay_in_row_and_own_columns"]
    assert read["outcome"] == "not run" and "alloc_for_decode_default" in read["reason"], read
    assert (code, data["verdict"], data["policies"][0]["verdict"]) == (3, "not run", "not run")
