"""Parsed modules of a source tree and static name resolution across them.

The evaluator follows ``from vllm.v1.worker.gpu.block_table import BlockTables``
to the class definition in the same tree, so a release's own block-table class
is read instead of assumed. Names imported from outside the tree (torch,
numpy) stay opaque :class:`~crossattn_sizing.audit.values.ExternalName` values.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field

from crossattn_sizing.audit.values import ClassRef, ExternalName, FuncRef
from crossattn_sizing.releases.sources import SourceTree

_BUILTIN_NAMES = frozenset(dir(builtins))


@dataclass
class Module:
    """One parsed file: its dotted name, tree path, syntax tree and top-level bindings."""

    name: str
    path: str
    tree: ast.Module
    is_package: bool
    bindings: dict[str, ast.stmt] = field(default_factory=dict)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)

    @property
    def package(self) -> str:
        """The package relative imports resolve against (the module itself when it is one)."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


@dataclass(frozen=True)
class ModRef:
    """An in-tree module used as a value (``from vllm.x import submodule``)."""

    name: str


class ModuleIndex:
    """Lazily parses modules of one tree and resolves names in them."""

    def __init__(self, tree: SourceTree) -> None:
        self.tree = tree
        self._modules: dict[str, Module | None] = {}
        self.syntax_errors: dict[str, str] = {}
        """Tree paths that exist but do not parse, and why: "does not parse" is not "not found"."""

    def module(self, name: str) -> Module | None:
        """The parsed module ``name`` (dotted), or None when the tree lacks it or it does not parse."""
        if name in self._modules:
            return self._modules[name]
        base = name.replace(".", "/")
        result = None
        for path, is_package in ((f"{base}.py", False), (f"{base}/__init__.py", True)):
            text = self.tree.read(path)
            if text is None:
                continue
            try:
                parsed = ast.parse(text, filename=path)
            except SyntaxError as exc:
                self.syntax_errors[path] = f"{exc.msg}, line {exc.lineno}"
                break
            result = Module(name, path, parsed, is_package)
            _index_bindings(result)
            break
        self._modules[name] = result
        return result

    def module_for_path(self, path: str) -> Module | None:
        """The module stored at a tree path like ``vllm/v1/worker/gpu/model_runner.py``."""
        name = path[: -len(".py")] if path.endswith(".py") else path
        if name.endswith("/__init__"):
            name = name[: -len("/__init__")]
        return self.module(name.replace("/", "."))

    def resolve(self, module: Module, name: str, depth: int = 0) -> object | None:
        """What a top-level name of ``module`` refers to.

        Returns a :class:`FuncRef`, :class:`ClassRef`, :class:`ModRef`, an
        :class:`ExternalName`, the ``ast.Assign``/``ast.AnnAssign`` that binds
        it at module level (the evaluator computes it), or None if unbound.
        """
        if depth > 8:
            return None
        node = module.bindings.get(name)
        if isinstance(node, ast.FunctionDef):
            return FuncRef(module.name, node)
        if isinstance(node, ast.ClassDef):
            return ClassRef(module.name, node)
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            return node
        if name in module.imports:
            source, attr = module.imports[name]
            return self._resolve_import(source, attr, depth)
        return None

    def _resolve_import(self, source: str, attr: str | None, depth: int) -> object:
        if attr is None:  # import x.y [as z]
            return ModRef(source) if self.module(source) is not None else ExternalName(source, "")
        target = self.module(source)
        if target is not None:
            found = self.resolve(target, attr, depth + 1)
            if found is not None:
                return found
        if self.module(f"{source}.{attr}") is not None:
            return ModRef(f"{source}.{attr}")
        return ExternalName(source, attr)

    def module_of(self, ref: FuncRef | ClassRef) -> Module:
        """The parsed module ``ref`` was defined in."""
        module = self.module(ref.module)
        assert module is not None  # refs are only made for parsed modules
        return module

    def find_method(self, cls: ClassRef, name: str, depth: int = 0) -> FuncRef | None:
        """``name`` defined on ``cls`` or, failing that, on a base class found in the tree."""
        for stmt in cls.node.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
                return FuncRef(cls.module, stmt, cls)
        if depth > 8:
            return None
        module = self.module_of(cls)
        for base in cls.node.bases:
            base_ref = self.resolve(module, base.id) if isinstance(base, ast.Name) else None
            if isinstance(base_ref, ClassRef):
                found = self.find_method(base_ref, name, depth + 1)
                if found is not None:
                    return found
        return None

    def ancestors(self, cls: ClassRef) -> tuple[list[ClassRef], list[str]]:
        """``cls`` and every base class found in the tree, and the bases that could not be resolved.

        Bases from outside the tree (``ABC``, ``Generic[...]``) are skipped: an
        outside class cannot be a class of the tree. A base the tree names but
        does not bind is returned as unresolved text.
        """
        found: list[ClassRef] = []
        unresolved: list[str] = []
        todo = [cls]
        while todo and len(found) < 64:
            current = todo.pop()
            if current in found:
                continue
            found.append(current)
            module = self.module_of(current)
            for base in current.node.bases:
                ref = self._base(module, base.value if isinstance(base, ast.Subscript) else base)
                if isinstance(ref, ClassRef):
                    todo.append(ref)
                elif ref is None:
                    unresolved.append(ast.unparse(base))
        return found, unresolved

    def _base(self, module: Module, node: ast.expr) -> object | None:
        """What a base-class expression names: a ClassRef, something outside the tree, or None (unbound)."""
        if isinstance(node, ast.Name):
            if node.id in _BUILTIN_NAMES:
                return ExternalName("builtins", node.id)
            return self.resolve(module, node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = self.resolve(module, node.value.id)
            if isinstance(owner, ModRef):
                inner = self.module(owner.name)
                return self.resolve(inner, node.attr) if inner is not None else None
            return ExternalName(node.value.id, node.attr)
        return None

    def classes_defining(self, path: str, method: str) -> list[ClassRef]:
        """Classes in the file at ``path`` that define (or inherit from the tree) ``method``."""
        module = self.module_for_path(path)
        if module is None:
            return []
        classes = [ClassRef(module.name, n) for n in module.tree.body if isinstance(n, ast.ClassDef)]
        return [c for c in classes if self.find_method(c, method) is not None]


def _index_bindings(module: Module) -> None:
    for stmt in module.tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            module.bindings[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    module.bindings[target.id] = stmt
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
            module.bindings[stmt.target.id] = stmt
        elif isinstance(stmt, ast.ImportFrom):
            source = _absolute(module, stmt.module, stmt.level)
            for alias in stmt.names:
                module.imports[alias.asname or alias.name] = (source, alias.name)
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname:
                    module.imports[alias.asname] = (alias.name, None)
                else:
                    top = alias.name.split(".")[0]
                    module.imports[top] = (top, None)


def _absolute(module: Module, name: str | None, level: int) -> str:
    if level == 0:
        return name or ""
    parts = module.package.split(".")
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    base = ".".join(parts)
    return f"{base}.{name}" if name else base


def is_enum(cls: ClassRef) -> bool:
    """Whether a class derives directly from an ``enum`` base (``Enum``, ``StrEnum``, ``enum.IntEnum``)."""
    return any(ast.unparse(b).rpartition(".")[2].endswith("Enum") for b in cls.node.bases)


def class_constants(cls: ClassRef) -> set[str]:
    """Names a class body assigns at its top level (an enum's members)."""
    names: set[str] = set()
    for stmt in cls.node.body:
        if isinstance(stmt, ast.Assign):
            names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            names.add(stmt.target.id)
    return names
