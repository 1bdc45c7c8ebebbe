"""The README stays a day-one page: short, its links and paths real, and every property named.

Everything else lives in docs/, one topic a file; the README points there. A
link or a path that no longer resolves, a property module added without a row,
or a README grown past its bound fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 250

LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
REPO_PATH = re.compile(r"`((?:src|properties|reference|tests|docs|benchmarks|reports|\.ci)/[^`\s]*)`")
SUPPORT = re.compile(r"(_strategies|_assertions|_scenarios)\.py$")
"""Property-suite modules that hold strategies, assertions or scenarios, not properties."""
NOT_PROPERTIES = {"__init__.py", "conftest.py", "assertions.py", "failures.py", "oracle.py"}


def property_modules() -> list[str]:
    """The suite's property modules: ``test_*.py`` and the engine properties beside them."""
    return sorted(p.name for p in (ROOT / "properties").glob("*.py")
                  if p.name not in NOT_PROPERTIES and not SUPPORT.search(p.name))  # fmt: skip


def test_the_readme_is_at_most_250_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_every_docs_link_resolves() -> None:
    """Every relative link in the README and in docs/*.md names a file that exists."""
    broken = []
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for target in LINK.findall(page.read_text()):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    links = LINK.findall(README.read_text())
    assert sum(t.startswith("docs/") and t.endswith(".md") for t in links) >= 10, "the README links docs/"
    assert not broken, f"links to nothing: {broken}"


def test_every_path_the_readme_names_exists() -> None:
    missing = [p for p in REPO_PATH.findall(README.read_text()) if not (ROOT / p).exists()]
    assert not missing, f"README.md names paths the tree does not have: {missing}"


def test_what_is_checked_names_every_property_module() -> None:
    text = README.read_text()
    modules = property_modules()
    assert {"test_capacity.py", "cross_pool_capacity.py", "sglang_attention.py"} <= set(modules)
    unnamed = [m for m in modules if f"`{m}`" not in text]
    assert not unnamed, f"property modules the README's 'What is checked' leaves out: {unnamed}"
