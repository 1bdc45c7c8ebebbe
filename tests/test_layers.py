"""The package's import plan: its folders are its layers, in one order, and no import goes up it.

A cycle makes two modules (or two folders) one: neither can be read, tested or moved alone. An
upward import makes a lower layer depend on a higher one: a sizing policy that imports the engine
adapter, say, cannot be checked without it. Both are found by reading every module with
:mod:`ast`, imports at any depth included (inside functions, ``if TYPE_CHECKING``), since a lazy
import is a dependency all the same; nothing is imported to check them.

The map names folders only: a module's layer is its folder's, so a new module needs no entry, and
the package's top level holds no module but ``__init__`` and ``__main__``.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PACKAGE = "crossattn_sizing"
SOURCE = Path(__file__).resolve().parents[1] / "src" / PACKAGE

FOLDERS: tuple[str, ...] = (
    "__init__",     # the package itself: empty
    "base",         # utilities every layer may use: errors, integer maths, limits, settings, the user's code,
                    # Ctrl-C and child processes, the --device check (it works without torch)
    "core",         # the model of the engine's sizing: configs, policies, admission, capacity. Pure Python
    "releases",     # an engine release as files: fetching a wheel, opening a tree, checking a version
    "impl",         # the implementation interface (Impl, the torch step records) and the harness's kernels
    "findings",     # what a run finds beside the proofs, and the result records
    "prove",        # exhaustive checking over a bounded domain
    "models",       # Hugging Face models: adapters, families, reproduce's scenario
    "engine",       # an engine release's own code, run in a worker
    "audit",        # reading (and executing) a release's sizing code, judging it
    "symbolic",     # prove --symbolic: policies and a release's sizing as solver terms, via the audit
    "specs",        # a --policy / --impl spec resolved to a policy, an implementation or a release
    "distributed",  # DCP over torch.distributed
    "fleet",        # the fuzzing fleet's shared example database and its redis-server
    "runs",         # running the property suite: the pytest plugin, verify's shared run, fuzz workers
    "commands",     # the CLI, its subcommands and the reports only a command writes
    "__main__",     # ``python -m crossattn_sizing``
)  # fmt: skip
"""Folders (and the two top-level modules), lowest first: a module imports only from its own folder or
an earlier one. The order is the one the imports give (a topological order of the folder graph)."""

FORBIDDEN: tuple[tuple[str, str], ...] = (("engine", "audit"),)
"""Folder pairs named on their own (the order forbids them too): running a release never needs its audit;
both take the release's files from ``releases/``."""

BANNED: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("torch", ("core",)),  # the core is pure Python: the torch records of the interface live in impl/
    ("triton", ("base", "core")),
    ("hypothesis", ("base", "core")),  # discarding an example (``reject()``) is the property layer's
)
"""Top-level package -> folders whose modules never import it, at any depth."""


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


def folder_of(module: str, package: str) -> str:
    """The folder right under the package holding ``module`` (a top-level module is its own name)."""
    return (module.removeprefix(package).lstrip(".") or "__init__").split(".")[0]


def folder_graph(graph: Mapping[str, Mapping[str, str]], package: str) -> dict[str, dict[str, str]]:
    """Folder -> {folder it imports: the first module-level import that says so (``a -> b at where``)}."""
    out: dict[str, dict[str, str]] = {}
    for module, edges in sorted(graph.items()):
        mine = folder_of(module, package)
        out.setdefault(mine, {})
        for target, where in sorted(edges.items()):
            theirs = folder_of(target, package)
            if theirs != mine:
                out[mine].setdefault(theirs, f"{module} -> {target} at {where}")
    return out


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


def upward_imports(folders: Mapping[str, Mapping[str, str]], order: tuple[str, ...]) -> list[str]:
    """Each folder import that goes up ``order``, said with both folders and where."""
    rank = {name: index for index, name in enumerate(order)}
    return [
        f"{a} imports {b}, a later folder ({where})"
        for a, edges in sorted(folders.items())
        for b, where in sorted(edges.items())
        if a in rank and b in rank and rank[b] > rank[a]
    ]


def forbidden_imports(
    folders: Mapping[str, Mapping[str, str]], pairs: tuple[tuple[str, str], ...]
) -> list[str]:
    return [f"{a} imports {b} ({folders[a][b]})" for a, b in pairs if b in folders.get(a, {})]


def unassigned(folders: Mapping[str, object], order: tuple[str, ...]) -> list[str]:
    return sorted(set(folders) - set(order))


def stale(folders: Mapping[str, object], order: tuple[str, ...]) -> list[str]:
    """Entries of ``order`` that name no folder (a folder removed or renamed would assign nothing)."""
    return [name for name in order if name not in folders]


def loose_modules(root: Path) -> list[str]:
    """Modules at the package's top level but ``__init__`` and ``__main__``: each belongs in a folder."""
    return sorted(p.name for p in root.glob("*.py") if p.stem not in ("__init__", "__main__"))


def banned_imports(root: Path, package: str, banned: tuple[tuple[str, tuple[str, ...]], ...]) -> list[str]:
    """``module (folder) imports name at file:line`` for each import of a package banned in its folder."""
    out = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root, package)
        folder = folder_of(module, package)
        tops = {top for top, folders in banned if folder in folders}
        if not tops:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for name, line in imported_names(tree, module, path.name == "__init__.py"):
            if name.split(".")[0] in tops:
                out.append(f"{module} ({folder}) imports {name} at {path.relative_to(root.parent)}:{line}")
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, str]]:
    return import_graph(SOURCE, PACKAGE)


@pytest.fixture(scope="module")
def folders(graph: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    return folder_graph(graph, PACKAGE)


def test_the_top_level_holds_folders_only() -> None:
    loose = loose_modules(SOURCE)
    assert not loose, f"modules at the top of {PACKAGE}/ (put each in its layer's folder): {', '.join(loose)}"


def test_every_folder_has_a_place_in_the_order(folders: dict[str, dict[str, str]]) -> None:
    missing = unassigned(folders, FOLDERS)
    assert not missing, f"folders missing from tests/test_layers.py FOLDERS: {', '.join(missing)}"
    gone = stale(folders, FOLDERS)
    assert not gone, f"FOLDERS entries that name no folder: {', '.join(gone)}"


def test_the_package_has_no_import_cycle(graph: dict[str, dict[str, str]]) -> None:
    cycle = import_cycle(graph)
    assert cycle is None, "import cycle (imports inside functions count too):\n" + chain(cycle or [], graph)


def test_the_folders_have_no_import_cycle(folders: dict[str, dict[str, str]]) -> None:
    cycle = import_cycle(folders)
    assert cycle is None, "folder-level import cycle:\n" + chain(cycle or [], folders)


def test_no_folder_imports_a_later_one(folders: dict[str, dict[str, str]]) -> None:
    upward = upward_imports(folders, FOLDERS)
    assert not upward, "imports up the layer order:\n  " + "\n  ".join(upward)


def test_the_engine_never_imports_the_audit(folders: dict[str, dict[str, str]]) -> None:
    found = forbidden_imports(folders, FORBIDDEN)
    assert not found, "forbidden folder imports:\n  " + "\n  ".join(found)


def test_banned_packages_stay_out_of_their_folders() -> None:
    """No torch in core/, no Triton or Hypothesis in base/ or core/ (imports inside functions included)."""
    found = banned_imports(SOURCE, PACKAGE, BANNED)
    assert not found, "banned imports:\n  " + "\n  ".join(found)


def engine_family_of(module: str, package: str) -> str | None:
    """The engine family (``vllm``, ``sglang``, ...) of a module of ``engine/<family>/``, else None."""
    parts = module.removeprefix(package).lstrip(".").split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "engine" else None


def cross_family_imports(graph: Mapping[str, Mapping[str, str]], package: str) -> list[str]:
    """Each import from one engine family's sub-package into another's: families stand alone, so an
    engine is added (or removed) as one sub-package and one registry line."""
    out = []
    for module, edges in sorted(graph.items()):
        mine = engine_family_of(module, package)
        for target, where in sorted(edges.items()):
            theirs = engine_family_of(target, package)
            if mine and theirs and theirs != mine:
                out.append(f"{module} ({mine}) imports {target} ({theirs}) at {where}")
    return out


def test_engine_families_never_import_each_other(graph: dict[str, dict[str, str]]) -> None:
    found = cross_family_imports(graph, PACKAGE)
    assert not found, "imports between engine families:\n  " + "\n  ".join(found)


# Meta: the checker catches what it is for, on a planted package ----------------------------------------


def plant(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


PLANTED_ORDER = ("__init__", "low", "mid", "engine", "audit", "high")
CLEAN = {
    "low/__init__.py": "",
    "low/a.py": "import os\n",
    "mid/__init__.py": "",
    "mid/b.py": "from pkg.low import a\n",
    "engine/__init__.py": "",
    "engine/run.py": "from ..mid import b\n",
    "audit/__init__.py": "",
    "audit/read.py": "from pkg.engine import run\n",
    "high/__init__.py": "",
    "high/c.py": "from pkg import low\nfrom pkg.audit import read\n",
}


def test_meta_a_clean_planted_package_passes(tmp_path: Path) -> None:
    root = plant(tmp_path, CLEAN)
    graph = import_graph(root, "pkg")
    folders = folder_graph(graph, "pkg")
    assert folders["high"] == {"__init__": "pkg.high.c -> pkg at pkg/high/c.py:1",
                               "audit": "pkg.high.c -> pkg.audit at pkg/high/c.py:2",
                               "low": "pkg.high.c -> pkg.low at pkg/high/c.py:1"}  # fmt: skip
    assert import_cycle(graph) is None and import_cycle(folders) is None
    assert upward_imports(folders, PLANTED_ORDER) == []
    assert forbidden_imports(folders, (("engine", "audit"),)) == []
    assert unassigned(folders, PLANTED_ORDER) == [] and stale(folders, PLANTED_ORDER) == []
    assert loose_modules(root) == []
    assert banned_imports(root, "pkg", (("torch", ("low",)),)) == []


def test_meta_a_planted_module_cycle_is_reported_as_a_chain(tmp_path: Path) -> None:
    root = plant(tmp_path, {
        **CLEAN,
        "mid/b.py": "from pkg.low import a\n\ndef later():\n    from pkg.mid import deep  # lazy: counted\n",
        "mid/deep.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\n",
    })  # fmt: skip
    graph = import_graph(root, "pkg")
    cycle = import_cycle(graph)
    assert cycle == ["pkg.mid.b", "pkg.mid.deep", "pkg.mid.b"]
    assert chain(cycle, graph) == (
        "  pkg.mid.b -> pkg.mid.deep  (pkg/mid/b.py:4)\n  pkg.mid.deep -> pkg.mid.b  (pkg/mid/deep.py:3)"
    )
    assert import_cycle(folder_graph(graph, "pkg")) is None  # inside one folder: a module cycle only


def test_meta_a_planted_folder_cycle_is_caught_without_a_module_cycle(tmp_path: Path) -> None:
    """low.x -> mid.b -> low.a: no module imports itself back, yet the folders low and mid are one."""
    root = plant(tmp_path, {**CLEAN, "low/x.py": "def f():\n    from pkg.mid import b\n"})
    graph = import_graph(root, "pkg")
    assert import_cycle(graph) is None
    folders = folder_graph(graph, "pkg")
    cycle = import_cycle(folders)
    assert cycle == ["mid", "low", "mid"]
    assert chain(cycle, folders) == (
        "  mid -> low  (pkg.mid.b -> pkg.low at pkg/mid/b.py:1)\n"
        "  low -> mid  (pkg.low.x -> pkg.mid at pkg/low/x.py:2)"
    )
    assert upward_imports(folders, PLANTED_ORDER) == [
        "low imports mid, a later folder (pkg.low.x -> pkg.mid at pkg/low/x.py:2)"
    ]


def test_meta_a_planted_engine_to_audit_import_is_caught(tmp_path: Path) -> None:
    root = plant(tmp_path, {**CLEAN, "engine/run.py": "from ..mid import b\nfrom pkg.audit.read import x\n"})
    folders = folder_graph(import_graph(root, "pkg"), "pkg")
    assert forbidden_imports(folders, (("engine", "audit"),)) == [
        "engine imports audit (pkg.engine.run -> pkg.audit.read at pkg/engine/run.py:2)"
    ]
    assert import_cycle(folders) == ["audit", "engine", "audit"]


def test_meta_planted_torch_in_the_core_is_caught_at_any_depth(tmp_path: Path) -> None:
    root = plant(tmp_path, {
        **CLEAN,
        "low/a.py": "import os\n\ndef f():\n    if True:\n        import torch.nn as nn\n",
        "low/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from torch import Tensor\n",
        "mid/t.py": "import torch\n",  # allowed there
    })  # fmt: skip
    assert banned_imports(root, "pkg", (("torch", ("low",)),)) == [
        "pkg.low.a (low) imports torch.nn at pkg/low/a.py:5",
        "pkg.low.b (low) imports torch at pkg/low/b.py:3",
        "pkg.low.b (low) imports torch.Tensor at pkg/low/b.py:3",
    ]


def test_meta_a_loose_module_an_unknown_folder_and_a_stale_entry_are_caught(tmp_path: Path) -> None:
    root = plant(tmp_path, {**CLEAN, "stray.py": "", "extra/__init__.py": ""})
    folders = folder_graph(import_graph(root, "pkg"), "pkg")
    assert loose_modules(root) == ["stray.py"]
    assert unassigned(folders, PLANTED_ORDER) == ["extra", "stray"]
    assert stale(folders, (*PLANTED_ORDER, "gone")) == ["gone"]


def test_meta_a_planted_import_between_engine_families_is_caught(tmp_path: Path) -> None:
    root = plant(tmp_path, {
        **CLEAN,
        "engine/one/__init__.py": "",
        "engine/one/x.py": "from pkg.engine import run\n",
        "engine/two/__init__.py": "",
        "engine/two/y.py": "def f():\n    from pkg.engine.one import x\n",
    })  # fmt: skip
    found = cross_family_imports(import_graph(root, "pkg"), "pkg")
    assert found == ["pkg.engine.two.y (two) imports pkg.engine.one.x (one) at pkg/engine/two/y.py:2"]
