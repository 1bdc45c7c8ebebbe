"""Where TensorRT-LLM's cross-pool sizing comes from, and how it runs without importing the engine.

``tensorrt_llm@PATH`` names a folder holding ``tensorrt_llm/`` (a checkout;
never written to). The sizing is two methods of ``KvCacheCreator`` in
``tensorrt_llm/_torch/pyexecutor/_util.py``, whose module imports most of the
engine (the C++ bindings, CUDA). So the file is parsed, and a class holding
only ``_get_config_int_attr`` and ``_get_cross_kv_cache_layout`` (their
decorators kept, their annotations dropped: those would evaluate the engine's
types) is compiled under the file's real name and line numbers. Every name
the module imports is bound to a :class:`StandIn` that raises
:class:`StandInUsed` naming it the moment anything uses it: the two methods
read config attributes only, so a tree whose sizing reaches for more gives
"not run" naming the piece, never a made-up result.

This module reads and compiles; executing is the worker's
(:mod:`crossattn_sizing.engine.tensorrt_llm.worker`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from types import CodeType
from typing import Any

from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.core.cross_pool import CrossPoolNotRun
from crossattn_sizing.engine.specs import tree_root

TREE_PREFIX = "tensorrt_llm@"
UTIL = "tensorrt_llm/_torch/pyexecutor/_util.py"
"""The file the sizing is read from (inside the tree)."""

CLASS = "KvCacheCreator"
FUNCTION = "_get_cross_kv_cache_layout"
HELPER = "_get_config_int_attr"
QUALNAME = f"{CLASS}.{FUNCTION}"
PARAMETERS = ("self", "fallback_max_seq_len")
"""The signature the adapter calls: ``(self, fallback_max_seq_len=None)`` (it passes no fallback)."""


def is_tensorrt_llm_spec(spec: str) -> bool:
    """Whether an ``--engine`` value names TensorRT-LLM (``tensorrt_llm@PATH``, or a release it refuses)."""
    s = spec.strip()
    return s.startswith(TREE_PREFIX) or s.startswith(("tensorrt_llm==", "tensorrt-llm=="))


def tensorrt_llm_tree_root(spec: str) -> Path:
    """The folder holding ``tensorrt_llm/`` that ``spec`` names; one :class:`ReleaseUnavailable` line if none.

    A release (``tensorrt_llm==X``) is refused: the registry's ``tensorrt-llm``
    is a wheel stub holding no Python source (docs/engine.md).
    """
    s = spec.strip()
    if not s.startswith(TREE_PREFIX):
        raise ReleaseUnavailable(
            f"{s}: TensorRT-LLM is taken as a source tree only, tensorrt_llm@PATH (the registry's "
            "tensorrt-llm "
            "is a wheel stub without its Python source)"
        )
    return tree_root(s, "tensorrt_llm", "_torch/pyexecutor/_util.py")


class StandInUsed(RuntimeError):
    """The engine's sizing used a name its module imports; the harness stands in for none: not run.

    Its text names the stand-in and follows what used it (``KvCacheCreator._get_cross_kv_cache_layout
    used torch.tensor, ...``): the class's name is the harness's, not the user's.
    """

    def __init__(self, used: str) -> None:
        self.used = used
        super().__init__(f"used {used}, which the harness does not provide (every name {UTIL} imports "
                         "is a stand-in)")  # fmt: skip


class StandIn:
    """What every name ``_util.py`` imports is bound to: any use raises :class:`StandInUsed` naming it.

    Why not the SGLang adapter's stand-ins: those bind the standard library and
    torch for real; here nothing the module imports is needed, so nothing is real.
    """

    def __init__(self, qualname: str) -> None:
        object.__setattr__(self, "_qualname", qualname)

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise StandInUsed(object.__getattribute__(self, "_qualname"))

    __call__ = __getitem__ = __iter__ = __bool__ = __eq__ = __lt__ = __int__ = __index__ = _refuse
    __hash__ = None  # type: ignore[assignment]

    def __getattr__(self, name: str) -> Any:
        raise StandInUsed(f"{object.__getattribute__(self, '_qualname')}.{name}")

    def __repr__(self) -> str:
        return f"<stand-in {object.__getattribute__(self, '_qualname')}>"


@dataclass(frozen=True)
class LayoutSource:
    """The two methods compiled from one tree's ``_util.py``, and what the module imports."""

    path: Path
    code: CodeType
    function_line: int
    imports: dict[str, str]  # bound name -> what it names (module or module.attr)
    signature_problem: str | None


def _signature(func: ast.FunctionDef) -> tuple[tuple[str, ...], int, bool]:
    args = func.args
    names = tuple(a.arg for a in [*args.posonlyargs, *args.args])
    extra = bool(args.vararg or args.kwarg or args.kwonlyargs)
    return names, len(args.defaults), extra


def _imports(tree: ast.Module) -> dict[str, str]:
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for alias in node.names:
                out[alias.asname or alias.name] = f"{module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                out[alias.asname or alias.name.split(".")[0]] = alias.name
    return out


def read_layout_source(root: Path) -> LayoutSource:
    """Parse ``root``'s ``_util.py``, compile a class holding the two methods; refuse a tree without them.

    A missing or unreadable file, a syntax error, or a file without
    ``KvCacheCreator`` or either method is one :class:`ReleaseUnavailable`
    line. A function whose parameters changed compiles, and
    ``signature_problem`` says how: the harness does not know what to pass it
    (a "not run", not bad input). A file the harness's parser gives up on (an
    expression chained past Python's recursion limit: ``ast`` builds it as
    deeply as it is long) says nothing about the tree: :class:`CrossPoolNotRun`.
    """
    path = root / UTIL
    if not path.is_file():
        raise ReleaseUnavailable(f"{root}: the tree has no {UTIL} (the harness runs {QUALNAME} from it)")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ReleaseUnavailable(f"{path}: the file cannot be read: {exc}") from None
    try:
        return _compiled(path, text)
    except (RecursionError, MemoryError) as exc:  # the harness's parser or compiler gave up, not the tree
        raise CrossPoolNotRun(
            f"{UTIL}: the harness's parser gave up on the file ({type(exc).__name__}: an expression "
            "nested or chained past Python's limit); the sizing was never asked"
        ) from None


def _compiled(path: Path, text: str) -> LayoutSource:
    """:func:`read_layout_source`'s work on the file's text (its own errors, one line each)."""
    try:
        tree = ast.parse(text, filename=str(path))
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        where = f"{path}:{line}" if line else str(path)  # a null byte has no line: none is made up
        raise ReleaseUnavailable(f"{where}: the file does not parse: {exc}") from None
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == CLASS), None)
    if cls is None:
        raise ReleaseUnavailable(f"{path}: the tree has no class {CLASS} (the harness runs {QUALNAME})")
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in (FUNCTION, HELPER)}
    for name in (FUNCTION, HELPER):
        if name not in methods:
            raise ReleaseUnavailable(
                f"{path}:{cls.lineno}: {CLASS} has no {name} (the harness runs {QUALNAME})"
            )
    func = methods[FUNCTION]
    names, defaults, extra = _signature(func)
    problem = None
    if names != PARAMETERS or defaults != 1 or extra:
        written = ast.unparse(func.args)
        problem = (f"{UTIL}:{func.lineno}: {QUALNAME}({written}) is not ({', '.join(PARAMETERS)}=None), the "
                   "signature the harness calls: not run")  # fmt: skip
    for method in methods.values():  # annotations would evaluate the engine's types: dropped
        method.returns = None
        for arg in [*method.args.posonlyargs, *method.args.args, *method.args.kwonlyargs]:
            arg.annotation = None
    holder = ast.ClassDef(name=CLASS, bases=[], keywords=[], body=[methods[HELPER], func], decorator_list=[])
    if "type_params" in ast.ClassDef._fields:  # Python 3.12+
        holder.type_params = []  # type: ignore[attr-defined]
    ast.copy_location(holder, cls)
    holder.end_lineno = func.end_lineno
    code = compile(ast.Module(body=[holder], type_ignores=[]), str(path), "exec")
    return LayoutSource(path, code, func.lineno, _imports(tree), problem)
