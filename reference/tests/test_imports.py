"""The oracle stays standard-library only and independent of the implementation under test.

Each module of ``reference/`` (its tests excepted) is parsed with ``ast`` and every
import is checked against ``sys.stdlib_module_names``. Relative imports and
``reference.*`` are allowed; dynamic imports are refused outright, since the oracle
needs none and they would hide a dependency from this check.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REFERENCE_DIR = Path(__file__).resolve().parents[1]
IMPLEMENTATION_PACKAGE = "crossattn_sizing"
OWN_PACKAGE = "reference"
EXPECTED_MODULES = {"__init__", "pool", "block_table", "slots", "cache", "attention", "model", "checks"}


def import_violations(source: str, filename: str = "<string>") -> list[str]:
    """Every import in ``source`` that the oracle may not have, as readable messages."""
    problems: list[str] = []

    def check(module: str, lineno: int) -> None:
        root = module.split(".")[0]
        if root == IMPLEMENTATION_PACKAGE:
            problems.append(f"{filename}:{lineno}: imports the implementation under test ({module})")
        elif root != OWN_PACKAGE and root not in sys.stdlib_module_names:
            problems.append(f"{filename}:{lineno}: imports non-stdlib module {module}")

    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module is not None:
                check(node.module, node.lineno)
        elif isinstance(node, ast.Call):
            func = node.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else ""
            )
            if name in {"__import__", "import_module"}:
                problems.append(f"{filename}:{node.lineno}: dynamic import via {name}()")
    return problems


def oracle_modules() -> list[Path]:
    return sorted(
        path for path in REFERENCE_DIR.rglob("*.py") if "tests" not in path.relative_to(REFERENCE_DIR).parts
    )


def test_the_oracle_modules_are_all_found() -> None:
    # Guards against a vacuous pass: a wrong directory would find no files to check.
    assert {path.stem for path in oracle_modules()} >= EXPECTED_MODULES


@pytest.mark.parametrize("path", oracle_modules(), ids=lambda p: str(p.relative_to(REFERENCE_DIR)))
def test_oracle_module_imports_only_the_standard_library(path: Path) -> None:
    assert import_violations(path.read_text(encoding="utf-8"), str(path)) == []


@pytest.mark.parametrize(
    "source",
    [
        "import torch",
        "import numpy as np",
        "from hypothesis import given",
        "import os, torch.nn",
        "import crossattn_sizing",
        "from crossattn_sizing.config import Config",
        "def f():\n    import triton\n",
        "try:\n    import numpy\nexcept ImportError:\n    numpy = None\n",
        "__import__('torch')",
        "import importlib\nimportlib.import_module('numpy')",
    ],
)
def test_checker_flags_forbidden_imports(source: str) -> None:
    assert import_violations(source) != []


@pytest.mark.parametrize(
    "source",
    [
        "import math",
        "from __future__ import annotations",
        "from collections.abc import Sequence",
        "from dataclasses import dataclass, field",
        "from . import slots",
        "from .slots import PAD_SLOT_ID",
        "from reference.slots import PAD_SLOT_ID",
        "import reference.attention",
    ],
)
def test_checker_accepts_allowed_imports(source: str) -> None:
    assert import_violations(source) == []


def test_checker_names_the_implementation_explicitly() -> None:
    [message] = import_violations("from crossattn_sizing import admission", "x.py")
    assert "implementation under test" in message and message.startswith("x.py:1:")
