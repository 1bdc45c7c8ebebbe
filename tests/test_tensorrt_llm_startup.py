"""TensorRT-LLM's start-up batches: the recorded tree has no warm-up path, and verify says so ("not run").

The recorded tree (tests/fixtures/tensorrt_llm/0004396) holds only
``_util.py``'s two sizing methods: neither ``PyTorchModelEngine._create_warmup_request``
(``model_engine.py``) nor ``KvCacheCreator._create_dummy_context_requests``.
A tree that has one is named with its ``file:line``, still "not run" (no
adapter runs it), never "holds".
"""

from __future__ import annotations

import shutil
from pathlib import Path

from crossattn_sizing.engine.registry import family
from crossattn_sizing.engine.tensorrt_llm.startup import MODEL_ENGINE, startup_absence
from tests.tensorrt_llm_tree import FIXED, RECORDED, spec


def test_the_recorded_trees_have_no_warm_up_path() -> None:
    for tree in (RECORDED, FIXED):
        reason = startup_absence(tree)
        assert reason.startswith("not run: the tree has no warm-up path")
        assert "PyTorchModelEngine._create_warmup_request" in reason


def test_a_tree_with_a_warm_up_method_is_named_and_still_not_run(tmp_path: Path) -> None:
    tree = tmp_path / "warm"
    shutil.copytree(RECORDED, tree)
    (tree / MODEL_ENGINE).write_text("class PyTorchModelEngine:\n\n    def _create_warmup_request(self):\n"
                                     "        return None\n")
    reason = startup_absence(tree)
    assert f"{MODEL_ENGINE}:3 (PyTorchModelEngine._create_warmup_request)" in reason
    assert reason.startswith("not run:") and "no adapter" in reason


def test_verify_suite_carries_the_start_up_row() -> None:
    suite = family("tensorrt_llm").verify_suite(spec(RECORDED))
    assert suite.startup_not_run == startup_absence(RECORDED)


def test_a_file_the_parser_gives_up_on_claims_no_absence(tmp_path: Path) -> None:
    tree = tmp_path / "nul"
    shutil.copytree(RECORDED, tree)
    (tree / MODEL_ENGINE).write_bytes(b"x = 1\x00\n")
    reason = startup_absence(tree)
    assert reason.startswith("not run: the harness could not parse the tree for a warm-up path")
