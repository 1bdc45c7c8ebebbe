"""docs/layout.md is the layout's one description, and its folder lines hold for the tree.

As docs/settings.md is checked row by row, the layout is checked line by line,
both ways: every folder line names a folder that exists and every folder has a
line; a module a line names lies in that folder; and in the folders whose
modules the docs tell you to edit (the package, the property suite, the
oracle) every module is named on its folder's line. A module moved, added or
deleted without its line fails here, naming it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "layout.md"

WALKED = ("src/crossattn_sizing", "properties", "reference", "tests", "benchmarks", "reports", "docs")
"""Folders whose every sub-folder needs a line (the recorded trees under tests/fixtures/ are data: their
own folders are not the layout's)."""
COMPLETE = ("src/crossattn_sizing", "properties", "reference")
"""Trees whose folders' lines must name every module of the folder (``__init__.py`` excepted)."""
NOT_COMPLETE = ("reference/tests",)
"""Test folders inside those trees: a line each, their modules not listed."""
LINE = re.compile(r"^- `([^`]+/)`:")
NAMED = re.compile(r"`([A-Za-z0-9_]+\.py)`")
PATHS = re.compile(r"`((?:src|properties|reference|tests|benchmarks|docs|reports)/[^`\s]+)`")
"""A path from the repository root (an engine tree's own paths, ``tensorrt_llm/...``, are not the tree's)."""


def folder_lines() -> dict[str, str]:
    """Each folder line's folder (as written, without the slash) -> the text of its bullet."""
    lines: dict[str, str] = {}
    current: str | None = None
    for line in DOC.read_text().splitlines():
        found = LINE.match(line)
        if found:
            current = found.group(1).rstrip("/")
            assert current not in lines, f"docs/layout.md: {current}/ has two lines"
            lines[current] = line
        elif current is not None and line.startswith("  "):
            lines[current] += " " + line.strip()
        else:
            current = None
    return lines


def tree_folders() -> set[str]:
    """Every folder of the walked trees, but caches and the recorded engine trees' insides."""
    out = set()
    for top in WALKED:
        out.add(top)
        for path in (ROOT / top).rglob("*"):
            rel = path.relative_to(ROOT).as_posix()
            if not path.is_dir() or "__pycache__" in path.parts or any(p.startswith(".") for p in path.parts):
                continue
            if rel.startswith("tests/fixtures/"):
                continue
            out.add(rel)
    return out


def modules(folder: str) -> set[str]:
    return {p.name for p in (ROOT / folder).glob("*.py") if p.name != "__init__.py"}


LINES = folder_lines()


def test_every_folder_line_names_a_folder_and_every_folder_has_one() -> None:
    missing = sorted(tree_folders() - set(LINES))
    stale = sorted(f for f in LINES if not (ROOT / f).is_dir())
    assert not missing, f"folders without a line in docs/layout.md: {missing}"
    assert not stale, f"docs/layout.md names folders the tree does not have: {stale}"


def test_a_named_module_is_in_its_folder() -> None:
    wrong = []
    for folder, text in LINES.items():
        for name in NAMED.findall(text):
            if not (ROOT / folder / name).is_file():
                wrong.append(f"{folder}/{name}")
        wrong += [path for path in PATHS.findall(text) if not (ROOT / path.rstrip("/")).exists()]
    assert not wrong, f"docs/layout.md names modules its folder lacks (moved or deleted?): {wrong}"


def test_every_module_of_the_package_suite_and_oracle_is_named() -> None:
    unnamed = []
    for folder, text in LINES.items():
        inside = any(folder == top or folder.startswith(top + "/") for top in COMPLETE)
        if not inside or folder in NOT_COMPLETE:
            continue
        named = set(NAMED.findall(text))
        unnamed += [f"{folder}/{m}" for m in sorted(modules(folder) - named)]
    assert not unnamed, f"modules without a mention on their folder's line in docs/layout.md: {unnamed}"


def test_the_check_can_fail() -> None:
    """The parser finds the lines it checks: a layout it read as empty would pass everything above."""
    assert "src/crossattn_sizing/engine" in LINES and "properties" in LINES
    assert "interface.py" in NAMED.findall(LINES["src/crossattn_sizing/engine"])
    assert len(LINES) >= 30
