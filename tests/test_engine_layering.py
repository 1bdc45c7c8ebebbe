"""The engine doorway (issue 48): nothing outside ``engine/`` imports an engine family.

A family is a sub-package ``engine/<family>/`` (found from the modules on disk, so one added later is
covered without editing this test). The harness (every module of ``src/crossattn_sizing`` outside
``engine/``) and the property suite (``properties/``) reach a family only through
:mod:`crossattn_sizing.engine.registry` and :mod:`crossattn_sizing.engine.interface`; the tests
(``tests/``) unit-test the families and may import them. Imports are read as tests/test_layers.py
reads them (its :func:`~tests.test_layers.imported_names`: at any depth, relative ones resolved), and
that file keeps the families apart from each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_layers import PACKAGE, SOURCE, imported_names, module_name, plant

PROPERTIES = SOURCE.parents[1] / "properties"


def families(root: Path, package: str) -> set[str]:
    """The engine families of the package at ``root``: every sub-package of its ``engine/``."""
    return {p.parent.name for p in (root / "engine").glob("*/__init__.py")}


def family_imports_from_outside(root: Path, package: str, outside: list[tuple[Path, Path, str]]) -> list[str]:
    """``module imports target (family) at file:line`` for each import of one of ``package``'s engine
    families by a module of ``outside`` (``(file, its root, its package)``) that is not in a family."""
    known = families(root, package)
    out = []
    for path, base, name in outside:
        module = module_name(path, base, name)
        if module.startswith(f"{package}.engine."):
            continue  # inside engine/: the registry, the contract, the families themselves
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        seen: set[int] = set()  # one line per import statement: its module, not each name it loads
        for target, line in imported_names(tree, module, path.name == "__init__.py"):
            family = family_named(target, package)
            if family in known and line not in seen:
                seen.add(line)
                out.append(f"{module} imports {target} ({family}) at {path.relative_to(base.parent)}:{line}")
    return sorted(out)


def family_named(target: str, package: str) -> str | None:
    """The sub-package of ``package.engine`` that module ``target`` is or lies in, if any."""
    parts = target.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == [package, "engine"] else None


def modules(root: Path, package: str) -> list[tuple[Path, Path, str]]:
    return [(p, root, package) for p in sorted(root.rglob("*.py"))]


def test_the_families_are_found() -> None:
    """The check below is about something: the three built-in families are sub-packages of engine/."""
    assert {"vllm", "sglang", "tensorrt_llm"} <= families(SOURCE, PACKAGE)


def test_nothing_outside_engine_imports_a_family() -> None:
    everything = modules(SOURCE, PACKAGE) + modules(PROPERTIES, "properties")
    found = family_imports_from_outside(SOURCE, PACKAGE, everything)
    assert not found, "reach a family through engine/registry.py and interface.py:\n  " + "\n  ".join(found)


def test_meta_each_spelling_of_a_family_import_is_caught(tmp_path: Path) -> None:
    root = plant(tmp_path, {
        "engine/__init__.py": "",
        "engine/registry.py": "import importlib\n",
        "engine/one/__init__.py": "",
        "engine/one/x.py": "from pkg.engine import registry\n",
        "runs/__init__.py": "",
        "runs/ok.py": "from pkg.engine.registry import importlib\nfrom pkg.engine import registry\n",
        "runs/a.py": "from pkg.engine.one.x import f\n",
        "runs/b.py": "import pkg.engine.one.x as x\n",
        "runs/c.py": "from pkg.engine import one\n",
        "runs/d.py": "def f():\n    from ..engine.one import x\n",
    })  # fmt: skip
    suite = plant(tmp_path / "s", {"conftest.py": "from .oracle import f\nfrom pkg.engine.one import x\n"})
    found = family_imports_from_outside(root, "pkg", modules(root, "pkg") + modules(suite, "properties"))
    assert found == [
        "pkg.runs.a imports pkg.engine.one.x (one) at pkg/runs/a.py:1",
        "pkg.runs.b imports pkg.engine.one.x (one) at pkg/runs/b.py:1",
        "pkg.runs.c imports pkg.engine.one (one) at pkg/runs/c.py:1",
        "pkg.runs.d imports pkg.engine.one (one) at pkg/runs/d.py:2",
        "properties.conftest imports pkg.engine.one (one) at pkg/conftest.py:2",
    ]
