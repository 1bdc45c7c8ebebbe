"""Where SGLang's own code comes from, and how its modules run without importing the engine.

``sglang==X`` is the release's PyPI wheel, unpacked into the engine cache;
``sglang@PATH`` a folder holding ``sglang/`` (a checkout or an unpacked wheel,
never written to). Importing SGLang's attention backend pulls in most of the
engine and ``sgl_kernel`` (CUDA only), so the harness runs a module's *own
source* instead: the file is parsed, its top-level ``import`` statements are
replaced by bindings (the standard library and torch for real; every other
name to a stand-in from :data:`STAND_INS`, or to :class:`Missing`, which raises
:class:`~crossattn_sizing.engine.adapter.StandInReached` naming the piece the moment
anything uses it), and the rest of the module (classes, functions, decorators) is executed as the
release wrote it, under its real file name and line numbers. A function that
reaches for a piece with no stand-in therefore stops with that piece's name
(a "not run" verdict), never with a made-up result.

This module reads and compiles; it imports neither torch nor the engine.
"""

from __future__ import annotations

import ast
import importlib
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.engine.adapter import AdapterGap, StandInReached
from crossattn_sizing.engine.specs import tree_root

TREE_PREFIX = "sglang@"
RELEASE_PREFIX = "sglang=="

FILES = {
    "flashattention": "sglang/srt/layers/attention/flashattention_backend.py",
    "forward_batch_info": "sglang/srt/model_executor/forward_batch_info.py",
    "memory_pool": "sglang/srt/mem_cache/memory_pool.py",
    "schedule_batch": "sglang/srt/managers/schedule_batch.py",
    "allocation": "sglang/srt/mem_cache/allocation.py",
    "allocation_sizing": "sglang/srt/mem_cache/allocation_sizing.py",
    "decode_metadata_kernel": "sglang/kernels/ops/attention/metadata.py",
}
"""The release files the harness runs code from (paths inside the wheel)."""

REAL_MODULES = (
    "torch",
    "triton",
    "dataclasses",
    "typing",
    "enum",
    "functools",
    "logging",
    "math",
    "os",
    "abc",
    "collections",
    "contextlib",
    "itertools",
    "array",
    "time",
    "copy",
    "warnings",
    "__future__",
)
"""Top-level modules bound for real: the standard library and torch (the CPU build)."""


def sglang_tree_root(spec: str) -> Path:
    """The folder holding ``sglang/`` that ``sglang@PATH`` names; :class:`ReleaseUnavailable` if none."""
    return tree_root(spec, "sglang", "srt")


class TreeSyntaxError(ReleaseUnavailable):
    """A file the harness runs does not parse: the tree itself is broken (bad input, one line), not the
    harness's gap."""


def _refusal(how: str) -> Callable[..., Any]:
    """A special method of :class:`Missing`: doing ``how`` to it raises :class:`StandInReached`."""

    def refuse(self: Missing, *_: Any, **__: Any) -> Any:
        raise StandInReached(object.__getattribute__(self, "_qualname"), how)

    return refuse


class Missing:
    """A name a module imports that has no stand-in: any use raises :class:`StandInReached` naming it.

    Every use, not only a call or an attribute: a subscript, an iteration, a
    length, arithmetic, a comparison, a truth test or a conversion to a number
    would otherwise give Python's own ``TypeError`` (or, for a truth test, a
    silent True), which reads as the release's fault. Equality and hashing are
    left as ``object``'s, so a stand-in can still sit in a dict or be compared
    by identity.
    """

    def __init__(self, qualname: str) -> None:
        object.__setattr__(self, "_qualname", qualname)

    def __getattr__(self, name: str) -> Any:
        raise StandInReached(f"{object.__getattribute__(self, '_qualname')}.{name}", "looked up")

    def __repr__(self) -> str:
        return f"<missing {object.__getattribute__(self, '_qualname')}>"

    __call__ = _refusal("called")
    __getitem__ = _refusal("subscripted")
    __setitem__ = _refusal("assigned into")
    __delitem__ = _refusal("deleted from")
    __iter__ = _refusal("iterated")
    __len__ = _refusal("measured with len()")
    __contains__ = _refusal("searched with in")
    __bool__ = _refusal("tested for truth")
    __index__ = __int__ = __float__ = _refusal("converted to a number")
    __enter__ = __exit__ = _refusal("used as a context manager")
    __lt__ = __le__ = __gt__ = __ge__ = _refusal("compared")
    __neg__ = __pos__ = __abs__ = __invert__ = _refusal("used in arithmetic")
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refusal("used in arithmetic")
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = _refusal("used in arithmetic")
    __mod__ = __rmod__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = _refusal("used in arithmetic")
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _refusal("used in arithmetic")
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = _refusal("used in arithmetic")
    __mro_entries__ = _refusal("subclassed")


@dataclass(frozen=True)
class SourceModule:
    """A release file parsed: its path, its import-free body, and the names its imports bind."""

    path: Path
    body: ast.Module
    imports: Mapping[str, tuple[str, str | None]]  # bound name -> (module, attribute or None)
    rel: str = ""  # the path inside the release (``sglang/srt/...``), for "not run" lines


def parse_release_file(root: Path, key: str) -> SourceModule:
    """Parse ``FILES[key]`` (or the path ``key`` inside the tree) under ``root``.

    A missing file is an :class:`AdapterGap` (the release moved the code the
    harness runs: not run); a syntax error is the tree's own, one
    :class:`ReleaseUnavailable` line.
    """
    rel = FILES.get(key, key)
    path = root / rel
    if not path.is_file():
        raise AdapterGap(rel, f"the release has no {rel} (the harness runs code from it)", rel)
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as exc:
        raise TreeSyntaxError(f"{path}:{exc.lineno}: the tree has a syntax error: {exc.msg}") from None
    imports: dict[str, tuple[str, str | None]] = {}
    body = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for alias in node.names:
                imports[alias.asname or alias.name] = ("." * node.level + (node.module or ""), alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                imports[alias.asname or alias.name.split(".")[0]] = (alias.name, None)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            continue  # annotations only (the file uses ``from __future__ import annotations``)
        else:
            body.append(node)
    return SourceModule(path, ast.Module(body=body, type_ignores=[]), imports, rel)


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def find_class(module: SourceModule, name: str) -> ast.ClassDef:
    """The top-level class ``name`` of ``module``; :class:`AdapterGap` if the release lacks it."""
    for node in module.body.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AdapterGap(name, f"{module.rel or module.path} has no class {name} (the harness runs it)",
                     module.rel)


def require_methods(module: SourceModule, cls: str, methods: tuple[str, ...]) -> None:
    """An :class:`AdapterGap` naming the first method the harness calls that the release's class lacks."""
    node = find_class(module, cls)
    have = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    for method in methods:
        if method not in have:
            raise AdapterGap(f"{cls}.{method}", f"{cls} lacks {method} (the harness calls it)",
                             f"{module.rel}:{node.lineno}")


def compiled_decorator(node: ast.stmt) -> bool:
    """Whether a definition is decorated by ``torch.compile`` or ``torch._dynamo`` (compiling needs dynamo;
    the decode metadata path calls no such helper)."""
    for deco in getattr(node, "decorator_list", []):
        text = ast.unparse(deco)
        if text.startswith(("torch.compile", "torch._dynamo")):
            return True
    return False


def definitions(module: SourceModule) -> tuple[str, ...]:
    """Every top-level function and class of ``module`` the harness can define on a CPU (see
    :func:`compiled_decorator`): a release's helper the path calls is then its own, whatever it is named."""
    return tuple(
        node.name
        for node in module.body.body
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not compiled_decorator(node)
    )


def execute(
    module: SourceModule,
    stand_ins: Mapping[str, Any],
    only: tuple[str, ...] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run ``module``'s body (or only its top-level definitions named in ``only``) and return its namespace.

    Each imported name is bound to the real module or attribute when its top
    package is in :data:`REAL_MODULES`, else to ``stand_ins[name]``, else to
    :class:`Missing`.
    """
    name = f"crossattn_sglang_release.{module.path.stem}"
    holder = types.ModuleType(name)  # dataclasses look their class's module up in sys.modules
    holder.__file__ = str(module.path)
    sys.modules[name] = holder
    ns: dict[str, Any] = holder.__dict__
    for name, (source, attr) in module.imports.items():
        ns[name] = bind(name, source, attr, stand_ins)
    ns.update(extra or {})
    body = module.body.body
    if only is not None:
        for node in body:  # a definition left out is a named piece with no stand-in, not a NameError
            skipped = getattr(node, "name", None)
            if skipped is not None and skipped not in only:
                ns[skipped] = stand_ins.get(skipped) or Missing(
                    f"{module.path.name}:{skipped} (not executed by the harness)"
                )
        body = [n for n in body if getattr(n, "name", None) in only]
        for node in body:  # one by one: a definition whose decorator has no stand-in becomes a named piece
            code = compile(ast.Module(body=[node], type_ignores=[]), str(module.path), "exec")
            try:
                exec(code, ns)  # the release's own definition, run in the worker process
            except StandInReached as exc:
                ns[node.name] = Missing(f"{module.path.name}:{node.name} (defining it: {exc})")  # type: ignore[attr-defined]
        return ns
    code = compile(ast.Module(body=body, type_ignores=[]), str(module.path), "exec")
    exec(code, ns)  # the release's own module body, run in the worker process
    return ns


def take(ns: Mapping[str, Any], name: str, module: SourceModule) -> Any:
    """``ns[name]``, the definition the harness runs; an :class:`AdapterGap` naming it when the release
    has none (renamed or moved), never a bare ``KeyError``."""
    value = ns.get(name)
    where = module.rel or module.path.name
    if isinstance(value, Missing) and "defining it" in repr(value):  # its decorator reached a stand-in
        raise AdapterGap(name, f"{where}: {name} could not be defined: {value!r}", module.rel)
    if value is None or isinstance(value, Missing):
        raise AdapterGap(name, f"{module.rel or module.path.name} has no top-level {name} "
                         "(the harness runs it; renamed or moved in this release?)", module.rel)
    return value


def bind(name: str, source: str, attr: str | None, stand_ins: Mapping[str, Any]) -> Any:
    """The value ``name`` gets: the real thing, a stand-in, or :class:`Missing`."""
    if name in stand_ins:
        return stand_ins[name]
    top = source.split(".")[0]
    if top in REAL_MODULES:
        mod = importlib.import_module(source)
        if attr is None and name == top != source:  # `import a.b` binds a (with a.b loaded), as Python does
            return importlib.import_module(top)
        return mod if attr is None else getattr(mod, attr)
    return Missing(f"{source}.{attr}" if attr else source)


StandInFactory = Callable[[], Mapping[str, Any]]
