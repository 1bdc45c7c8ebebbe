"""The engine doorway (issue 48): nothing outside ``engine/`` imports an engine family, and no family imports
another.

A family is a sub-package of ``src/crossattn_sizing/engine/`` holding ``family.py`` (found on disk, so
one added later is covered without editing this test). The harness (every module of
``src/crossattn_sizing`` outside ``engine/``) and the property suite (``properties/``) reach a family only
through :mod:`crossattn_sizing.engine.registry` and :mod:`crossattn_sizing.engine.interface`; the tests
(``tests/``) unit-test the families and may import them. Imports are read from the syntax tree (every
``import`` and ``from ... import``, at any depth, relative ones resolved), so one inside a function counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "crossattn_sizing"
ENGINE = PACKAGE / "engine"
FAMILIES = sorted(p.parent.name for p in ENGINE.glob("*/family.py"))


def module_name(path: Path) -> str:
    """``crossattn_sizing.x.y`` for a file under src/, ``properties.x`` for one under properties/."""
    rel = path.relative_to(REPO / "src") if path.is_relative_to(REPO / "src") else path.relative_to(REPO)
    parts = list(rel.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(source: str, module: str, is_package: bool = False) -> list[str]:
    """Every module name ``source`` (the text of ``module``) imports, relative imports resolved; a
    ``from pkg import name`` counts as ``pkg.name`` too (``name`` may be a sub-module)."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - node.level + 1]
                target = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            found += [target, *(f"{target}.{a.name}" for a in node.names)]
    return found


def family_named(name: str) -> str | None:
    """The engine family ``name`` (a module name) lies in, if any."""
    parts = name.split(".")
    if parts[:2] == ["crossattn_sizing", "engine"] and len(parts) > 2 and parts[2] in FAMILIES:
        return parts[2]
    return None


def offenders(paths: list[Path], allowed: str | None = None) -> list[str]:
    """``file: module`` for each import of a family other than ``allowed``."""
    out = []
    for path in paths:
        module = module_name(path)
        for name in imported(path.read_text(encoding="utf-8"), module, path.name == "__init__.py"):
            found = family_named(name)
            if found is not None and found != allowed:
                out.append(f"{path.relative_to(REPO)}: {name}")
    return sorted(set(out))


def outside_engine() -> list[Path]:
    """Every module of the harness outside ``engine/``, and of the property suite."""
    harness = [p for p in PACKAGE.rglob("*.py") if not p.is_relative_to(ENGINE)]
    return sorted(harness + list((REPO / "properties").rglob("*.py")))


def test_the_families_are_found() -> None:
    """The check below is about something: the three built-in families are on disk as sub-packages."""
    assert {"vllm", "sglang", "tensorrt_llm"} <= set(FAMILIES)


def test_nothing_outside_engine_imports_a_family() -> None:
    found = offenders(outside_engine())
    assert not found, "reach a family through engine/registry.py and interface.py:\n" + "\n".join(found)


@pytest.mark.parametrize("family", FAMILIES)
def test_no_family_imports_another(family: str) -> None:
    found = offenders(sorted((ENGINE / family).rglob("*.py")), allowed=family)
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("source", "module", "caught"),
    [
        ("from crossattn_sizing.engine.vllm.adapters import VllmPolicy", "crossattn_sizing.runs.x", True),
        ("import crossattn_sizing.engine.sglang.client as c", "crossattn_sizing.runs.x", True),
        ("from crossattn_sizing.engine import tensorrt_llm", "crossattn_sizing.audit.x", True),
        ("def f():\n    from crossattn_sizing.engine.sglang import source", "properties.conftest", True),
        ("from ..sglang import client", "crossattn_sizing.engine.vllm.family", True),
        ("from . import releases", "crossattn_sizing.engine.sglang.family", False),
        ("from crossattn_sizing.engine.registry import family_of", "crossattn_sizing.runs.x", False),
        ("from crossattn_sizing.engine import interface", "crossattn_sizing.runs.x", False),
        ("from .oracle import attention", "properties.test_x", False),
    ],
)
def test_the_check_catches_a_family_import(source: str, module: str, caught: bool) -> None:
    """The meta-test: each spelling of a family import is seen (and the doorway's own modules are not)."""
    names = imported(source, module)
    inside = [f"crossattn_sizing.engine.{family_named(n)}" for n in names if family_named(n) is not None]
    assert any(not module.startswith(f) for f in inside) is caught, names
