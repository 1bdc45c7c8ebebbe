"""The package's import plan: no cycles, and every module imports only from its own layer or lower ones.

A cycle makes two modules one (neither can be read, tested or moved alone), and
an upward import makes the core depend on the edge: a sizing policy that
imports the engine adapter, say, cannot be checked without it. Both are found
by reading every module with :mod:`ast`, imports at any depth included (inside
functions, ``if TYPE_CHECKING``), since a lazy import is a dependency all the
same; nothing is imported to check them.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PACKAGE = "crossattn_sizing"
SOURCE = Path(__file__).resolve().parents[1] / "src" / PACKAGE

Layers = tuple[tuple[str, tuple[str, ...]], ...]

LAYERS: Layers = (
    # Utilities every layer may use: errors, integer maths, limits and environment settings,
    # loading and calling the user's code, Ctrl-C and child processes, the --device check (it must
    # work without torch installed, so it sits outside impl/, whose package imports torch).
    ("base", ("__init__", "errors", "intmath", "limits", "settings", "jsoninput", "callables", "usercode",
              "interrupts", "processes", "outcome", "devices", "pathkinds",
              "standard_output")),
    # The model of the engine's sizing: configs, policies, admission, block-table capacity, the
    # step records and slot layout kernels read. Pure Python: no torch kernels, no Hypothesis.
    ("core", ("core",)),
    # The implementation under test and the harness's runner of it (torch, Triton, devices).
    ("implementation", ("impl",)),
    # What is proved or found about a policy, and the result records a property's outcome fills.
    ("proving", ("prove", "findings")),
    # Adapters to code and data outside the harness: an engine release's own code, the audit of
    # its sources, Hugging Face models, multi-process runners, the fleet's example database; and
    # the one place a spec string is resolved to any of them (resolve).
    ("adapters", ("engine", "audit", "models", "distributed", "fleet", "fleet.database", "fleet.server",
                  "resolve")),
    # Running the property suite and reporting it: the pytest plugin (which wires the adapters
    # in), profiles, verify's shared run and worker, the fuzzing fleet's processes, outputs.
    ("runs", ("runs", "fleet.fuzz_workers")),
    # The CLI: commands and the reports only a command writes.
    ("commands", ("commands", "cli", "__main__", "audit.report", "audit.markdown")),
)  # fmt: skip
"""Module (relative to the package) or subpackage prefix -> layer, lowest first; the longest entry
that names a module or one of its parent packages decides ("audit.report" before "audit")."""

NO_HYPOTHESIS = ("base", "core")
"""Layers that never import Hypothesis: discarding an example (``reject()``) is the property layer's."""


def module_name(path: Path, root: Path, package: str) -> str:
    """``pkg.sub.mod`` for ``root/sub/mod.py``; a package's ``__init__.py`` is the package itself."""
    parts = path.relative_to(root).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((package, *parts))


def imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterable[tuple[str, int]]:
    """Every name an ``import`` anywhere in ``tree`` may load, with its line (relative imports resolved)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, node.module] if node.module else parts)
            else:
                base = node.module or ""
            yield base, node.lineno
            for alias in node.names:  # ``from pkg import mod`` loads the module pkg.mod
                yield f"{base}.{alias.name}", node.lineno


def import_graph(root: Path, package: str) -> dict[str, dict[str, str]]:
    """Module -> {module of the package it imports: where (``file:line``)}."""
    files = {module_name(p, root, package): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, dict[str, str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges: dict[str, str] = {}
        for name, line in imported_names(tree, module, path.name == "__init__.py"):
            if name in files and name != module:
                edges.setdefault(name, f"{path.relative_to(root.parent)}:{line}")
        graph[module] = edges
    return graph


def import_cycle(graph: Mapping[str, Mapping[str, str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None when the graph has none (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def chain(cycle: list[str], graph: Mapping[str, Mapping[str, str]]) -> str:
    """The cycle as one readable line per import: ``a -> b (where)``."""
    return "\n".join(f"  {a} -> {b}  ({graph[a][b]})" for a, b in itertools.pairwise(cycle))


def layer_of(module: str, package: str, layers: Layers) -> int | None:
    """Index of ``module``'s layer: the longest entry naming it or a package above it; None if none does."""
    relative = module.removeprefix(package).lstrip(".") or "__init__"
    best: tuple[int, int] | None = None  # (length of the entry, layer)
    for index, (_, entries) in enumerate(layers):
        for entry in entries:
            names_it = relative == entry or relative.startswith(entry + ".")
            if names_it and (best is None or len(entry) > best[0]):
                best = (len(entry), index)
    return None if best is None else best[1]


def upward_imports(
    graph: Mapping[str, Mapping[str, str]], package: str, layers: Layers
) -> list[str]:
    """Each import from a higher layer than the importer's, said with both layers and where."""
    out = []
    for module, edges in sorted(graph.items()):
        mine = layer_of(module, package, layers)
        for target, where in sorted(edges.items()):
            theirs = layer_of(target, package, layers)
            if mine is not None and theirs is not None and theirs > mine:
                out.append(f"{module} ({layers[mine][0]}) imports {target} ({layers[theirs][0]}) at {where}")
    return out


def unassigned(graph: Mapping[str, object], package: str, layers: Layers) -> list[str]:
    return sorted(m for m in graph if layer_of(m, package, layers) is None)


def hypothesis_imports(root: Path, package: str, layers: Layers,
                       banned: tuple[str, ...]) -> list[str]:  # fmt: skip
    """``module imports hypothesis at file:line`` for each import of Hypothesis in the ``banned`` layers."""
    names = [name for name, _ in layers]
    out = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root, package)
        index = layer_of(module, package, layers)
        if index is None or names[index] not in banned:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for name, line in imported_names(tree, module, path.name == "__init__.py"):
            if name.split(".")[0] == "hypothesis":
                out.append(f"{module} ({names[index]}) imports {name} at {path.name}:{line}")
                break
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, str]]:
    return import_graph(SOURCE, PACKAGE)


def test_every_module_has_a_layer(graph: dict[str, dict[str, str]]) -> None:
    missing = unassigned(graph, PACKAGE, LAYERS)
    assert not missing, f"modules with no layer in tests/test_layers.py LAYERS: {', '.join(missing)}"


def test_the_package_has_no_import_cycle(graph: dict[str, dict[str, str]]) -> None:
    cycle = import_cycle(graph)
    assert cycle is None, "import cycle (imports inside functions count too):\n" + chain(cycle or [], graph)


def test_no_module_imports_from_a_higher_layer(graph: dict[str, dict[str, str]]) -> None:
    upward = upward_imports(graph, PACKAGE, LAYERS)
    assert not upward, "imports from a higher layer:\n  " + "\n  ".join(upward)


def test_the_core_never_imports_hypothesis() -> None:
    found = hypothesis_imports(SOURCE, PACKAGE, LAYERS, NO_HYPOTHESIS)
    assert not found, "Hypothesis below the property layer:\n  " + "\n  ".join(found)


def test_every_layer_entry_names_a_module(graph: dict[str, dict[str, str]]) -> None:
    """A stale entry (a module removed or renamed) would silently assign nothing."""
    relative = {m.removeprefix(PACKAGE).lstrip(".") or "__init__" for m in graph}
    stale = [e for _, entries in LAYERS for e in entries
             if e not in relative and not any(r.startswith(e + ".") for r in relative)]  # fmt: skip
    assert not stale, f"LAYERS entries that name no module: {', '.join(stale)}"


# Meta: the checker catches what it is for, on a planted package ----------------------------------------


def plant(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


PLANTED_LAYERS: Layers = (("low", ("__init__", "low")), ("mid", ("mid", "sub")), ("high", ("high",)))


def test_meta_a_planted_cycle_is_reported_as_a_chain(tmp_path: Path) -> None:
    root = plant(tmp_path, {
        "low.py": "import os\n",
        "mid.py": "from pkg import low\n\ndef later():\n    from pkg.sub import deep  # lazy: counted\n",
        "sub/__init__.py": "",
        "sub/deep.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import mid\n",
    })  # fmt: skip
    graph = import_graph(root, "pkg")
    cycle = import_cycle(graph)
    assert cycle == ["pkg.mid", "pkg.sub.deep", "pkg.mid"]
    assert chain(cycle, graph) == (
        "  pkg.mid -> pkg.sub.deep  (pkg/mid.py:4)\n  pkg.sub.deep -> pkg.mid  (pkg/sub/deep.py:3)"
    )
    (root / "sub" / "deep.py").write_text("from pkg import low\n")
    assert import_cycle(import_graph(root, "pkg")) is None


def test_meta_a_planted_upward_import_and_hypothesis_are_caught(tmp_path: Path) -> None:
    root = plant(tmp_path, {
        "low.py": "def f():\n    from pkg.high import g\n    import hypothesis.errors\n",
        "mid.py": "from . import low\n",
        "high.py": "from pkg import mid\n",
        "stray.py": "",
    })  # fmt: skip
    graph = import_graph(root, "pkg")
    upward = upward_imports(graph, "pkg", PLANTED_LAYERS)
    assert upward == ["pkg.low (low) imports pkg.high (high) at pkg/low.py:2"]
    assert unassigned(graph, "pkg", PLANTED_LAYERS) == ["pkg.stray"]
    assert hypothesis_imports(root, "pkg", PLANTED_LAYERS, ("low",)) == [
        "pkg.low (low) imports hypothesis.errors at low.py:3"
    ]
    assert layer_of("pkg.sub.anything", "pkg", PLANTED_LAYERS) == 1  # a subpackage prefix
