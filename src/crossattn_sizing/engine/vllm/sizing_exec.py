"""Run the engine's own block-table sizing: a runner's ``initialize_kv_cache``, up to its sizing loop.

The sizing is inline in the model runner's ``initialize_kv_cache``. Importing
the model runner's module pulls in most of the engine (models, compilation,
distributed state), so the function is taken from the module's source
instead: its ``def`` is compiled on its own, under the real file name and
line numbers, with the module-level names it reads before the end of the
sizing loop imported from where the module imports them. Its body is cut
after the ``for`` loop that fills ``max_num_blocks_per_group``, and a
``return`` of the loop's locals takes the place of what followed: the
statements up to and including the loop run as the release wrote them, on a
stand-in ``self`` (the few attributes the sizing reads) with the engine's real
``KVCacheConfig`` objects; nothing after the loop (attention backends,
allocation) exists in the compiled code.

Why cut rather than trace and stop at the first line after the loop: the
same statements run either way, and a line tracer made every call about three
times slower (``prove`` asks for millions of configs).

This module imports nothing of the engine itself; the caller passes a
``resolve`` function giving the value of a module-level name (the worker
imports it for real; the fixture tests give stand-ins).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import CodeType
from typing import Any

from crossattn_sizing.engine.protocol import engine_line

RUNNER_PATH = "vllm/v1/worker/gpu/model_runner.py"
"""Where ModelRunner V2 keeps ``initialize_kv_cache`` (0.19.0 .. 0.34.0)."""

RUNNER_CLASS = "GPUModelRunner"

EXECUTED_RUNNERS: dict[str, tuple[str, str]] = {
    "v2": (RUNNER_PATH, RUNNER_CLASS),
    "cpu": ("vllm/v1/worker/cpu/standalone_model_runner.py", "StandaloneCPUModelRunner"),
}
"""Every runner whose own copy of the sizing loop the adapter executes: key -> (file, class).

0.34.0 keeps a second copy of V2's sizing (the three-way max included) in
``StandaloneCPUModelRunner``, which does not inherit it from the GPU runner:
a fix to one copy does not reach the other, so each is run on its own. The
keys are the audit's runner keys (:data:`crossattn_sizing.audit.extract.RUNNERS`).
"""

Resolve = Callable[[str, str, str], Any]
"""``resolve(module, attr, name)``: the value ``from module import attr as name`` binds."""


class SizingExecError(Exception):
    """The sizing could not be executed; the message says where in the engine's file and why."""


END = "__crossattn_sizing_end__"
"""The global the cut function returns beside its locals: only the end of the loop returns it."""

KEYS = ("block_sizes", "max_num_blocks_per_group", "block_table_max_model_len")
"""The loop's locals a caller gets back."""


@dataclass(frozen=True)
class SizingSource:
    """The compiled ``initialize_kv_cache`` of one release and what it needs."""

    path: str
    code: CodeType
    loop_start: int
    loop_end: int
    global_names: tuple[str, ...]
    imports: Mapping[str, tuple[str, str]]


def _module_imports(tree: ast.Module, package: str) -> dict[str, tuple[str, str]]:
    """``name -> (module, attr)`` for every top-level ``import``/``from ... import`` of a module."""
    out: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            module = node.module
            if node.level:  # relative import, resolved against the runner's package
                base = package.split(".")
                module = ".".join([*base[: len(base) - node.level + 1], node.module])
            for alias in node.names:
                out[alias.asname or alias.name] = (module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    out[alias.asname] = (alias.name, "")
                else:
                    head = alias.name.split(".")[0]
                    out[head] = (head, "")
    return out


def _sizing_loop(func: ast.FunctionDef, path: str) -> ast.For:
    """The top-level ``for`` of the function whose body appends to ``max_num_blocks_per_group``."""
    for stmt in func.body:
        if not isinstance(stmt, ast.For):
            continue
        for node in ast.walk(stmt):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "append"
                and isinstance(node.value, ast.Name)
                and node.value.id == "max_num_blocks_per_group"
            ):
                return stmt
    raise SizingExecError(
        f"{path}:{func.lineno}: initialize_kv_cache has no loop appending to "
        "max_num_blocks_per_group (the sizing this adapter runs)"
    )


def load_sizing_source(text: str, path: str = RUNNER_PATH, class_name: str = RUNNER_CLASS) -> SizingSource:
    """Compile ``<class_name>.initialize_kv_cache`` out of the runner module's source ``text``."""
    tree = ast.parse(text, filename=path)
    runner = next(
        (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None
    )
    if runner is None:
        what = " (ModelRunner V2 is not in this release)" if class_name == RUNNER_CLASS else ""
        raise SizingExecError(f"{path}: no class {class_name}{what}")
    func = next(
        (n for n in runner.body if isinstance(n, ast.FunctionDef) and n.name == "initialize_kv_cache"), None
    )
    if func is None:
        raise SizingExecError(f"{path}:{runner.lineno}: {class_name} has no initialize_kv_cache")
    loop = _sizing_loop(func, path)
    # Decorators and annotations are not part of the sizing (and would import more of the engine).
    func.decorator_list = []
    func.returns = None
    for arg in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]:
        arg.annotation = None
    # Names read as globals up to the end of the sizing loop: only those are imported.
    assigned = {a.arg for a in func.args.args + func.args.kwonlyargs}
    loads: list[str] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                assigned.add(node.id)
            elif node.lineno <= (loop.end_lineno or loop.lineno) and node.id not in loads:
                loads.append(node.id)
    package = path.removesuffix(".py").replace("/", ".").rsplit(".", 1)[0]
    imports = _module_imports(tree, package)
    names = tuple(n for n in loads if n not in assigned and n in imports)
    loop_end = loop.end_lineno or loop.lineno
    # Cut after the loop; return the loop's locals, marked as the end of the loop by END.
    done = ast.parse(f"return {END}, locals()").body[0]
    ast.copy_location(done, loop)
    for node in ast.walk(done):
        node.lineno = node.end_lineno = loop_end  # type: ignore[attr-defined]
    func.body = [*func.body[: func.body.index(loop) + 1], done]
    code = compile(ast.Module(body=[func], type_ignores=[]), path, "exec")
    return SizingSource(path, code, loop.lineno, loop_end, names, imports)


Sizing = Callable[[Any, Any], dict[str, Any]]
"""``sizing(runner, kv_cache_config)``: the loop's :data:`KEYS` as the engine's code left them."""


def bind(source: SizingSource, resolve: Resolve) -> Sizing:
    """The release's cut ``initialize_kv_cache`` with its module-level names resolved, ready to run.

    Binding once and running many times saves resolving and compiling per
    config; each run starts from the same resolved names, as a fresh import would.
    """
    namespace: dict[str, Any] = {"__name__": "crossattn_sizing_engine_sizing", END: object()}
    for name in source.global_names:
        module, attr = source.imports[name]
        namespace[name] = resolve(module, attr, name)
    exec(source.code, namespace)
    func = namespace["initialize_kv_cache"]
    end = namespace[END]

    def sizing(runner: Any, kv_cache_config: Any) -> dict[str, Any]:
        try:
            out = func(runner, kv_cache_config)
        except Exception as exc:
            line = engine_line(exc, source.path)
            raise SizingExecError(
                f"{source.path}:{line}: initialize_kv_cache raised {type(exc).__name__}: {exc}"
            ) from exc
        if not (type(out) is tuple and len(out) == 2 and out[0] is end):
            raise SizingExecError(
                f"{source.path}:{source.loop_end}: initialize_kv_cache returned before the end of its "
                "sizing loop"
            )
        return {k: out[1].get(k) for k in KEYS}

    return sizing


def run_sizing(source: SizingSource, runner: Any, kv_cache_config: Any, resolve: Resolve) -> dict[str, Any]:
    """Execute the sizing on ``runner`` (a stand-in ``self``) and return the loop's locals.

    Returns ``block_sizes``, ``max_num_blocks_per_group`` and
    ``block_table_max_model_len`` as the engine's code left them. An exception
    inside the engine's code is re-raised as :class:`SizingExecError` naming
    the line of the engine's file it came from.
    """
    return bind(source, resolve)(runner, kv_cache_config)
