"""The recorded TensorRT-LLM trees (tests/fixtures/tensorrt_llm/) and copies of them with one line changed."""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "tensorrt_llm"
RECORDED = FIXTURES / "0004396"
FIXED = FIXTURES / "0004396-fix19516"
UTIL = "tensorrt_llm/_torch/pyexecutor/_util.py"

LIMIT_LINE = "            max_seq_len = encoder_limit\n"
"""The fixed tree's line that makes the declared encoder limit the pool's length."""


def spec(tree: Path) -> str:
    """``tensorrt_llm@tree``."""
    return f"tensorrt_llm@{tree}"


def changed_copy(source: Path, target: Path, old: str, new: str) -> Path:
    """A copy of ``source`` with ``old`` replaced by ``new`` once in ``_util.py`` (line count kept)."""
    shutil.copytree(source, target)
    path = target / UTIL
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not in {path} exactly once"
    path.write_text(text.replace(old, new))
    return target


def with_line(source: Path, target: Path, number: int, line: str) -> Path:
    """A copy of ``source`` whose blank line ``number`` of ``_util.py`` holds ``line`` (line count kept)."""
    shutil.copytree(source, target)
    path = target / UTIL
    lines = path.read_text().split("\n")
    assert lines[number - 1] == "", f"line {number} of {path} is not blank"
    lines[number - 1] = line
    path.write_text("\n".join(lines))
    return target


def limit_ignored(target: Path) -> Path:
    """The fixed tree with the encoder limit ignored again (the pool keeps max_input_len or max_seq_len)."""
    return changed_copy(FIXED, target, LIMIT_LINE, "            max_seq_len = max_seq_len\n")
