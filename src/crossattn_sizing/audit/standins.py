"""Stand-ins: the harness's replacements for engine functions the audit cannot evaluate.

A few engine helpers on the sizing path build attention backends or ask
process groups (``init_attn_backend``, ``get_dcp_group``). The audit never
runs them; a stand-in gives, from the audited config, the one thing the sizing
reads of them (a kernel block size per group, the DCP world size) and nothing
else.

Where the shape of a stand-in's result matters (how many values
``init_attn_backend`` returns, and which one holds the kernel block sizes), it
is derived from the release's own definition of the function, read from the
tree, never fixed per version: 0.22.0 returns four values with the kernel
block sizes last, 0.23.0 on three. Every value a stand-in does not compute is
an :class:`~crossattn_sizing.audit.values.Unknown` that says it came from the
stand-in, so a report never blames the release for the harness's own gap.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from crossattn_sizing.audit.known import Context, DcpGroup, NotEvaluable
from crossattn_sizing.audit.values import FuncRef, StandInTuple, TList, Unknown
from crossattn_sizing.core.config import RunnerConfig

# (context, the release's own definition if the tree has it, args, kwargs) -> value
StandInFn = Callable[[Context, FuncRef | None, list[Any], dict[str, Any]], Any]

KERNEL_SIZES_NAME = "kernel_block_sizes"
KERNEL_SIZES_HELPER = "prepare_kernel_block_sizes"


def kernel_block_sizes(config: RunnerConfig) -> TList:
    """One kernel block size per group: the harness groups' ``kernel_block_size`` (a modelling choice)."""
    return TList(g.kbs for g in config.groups)


def _returns(node: ast.FunctionDef) -> list[ast.Return]:
    """The function's own ``return`` statements (not those of nested definitions)."""
    found: list[ast.Return] = []
    todo: list[ast.AST] = list(node.body)
    while todo:
        item = todo.pop()
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(item, ast.Return):
            found.append(item)
        todo.extend(ast.iter_child_nodes(item))
    return sorted(found, key=lambda r: r.lineno)


def _names_bound_from(node: ast.FunctionDef, helper: str) -> set[str]:
    """Local names the function assigns from a call to ``helper(...)``."""
    names: set[str] = set()
    for item in ast.walk(node):
        if isinstance(item, ast.Assign) and isinstance(item.value, ast.Call):
            func = item.value.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called == helper:
                names.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return names


def return_shape(definition: FuncRef, path: str) -> tuple[int, int | None, str] | str:
    """``(arity, kernel-sizes position, where)`` of ``init_attn_backend``'s result, or why not derivable.

    Every ``return`` must be a tuple display of one length, and at most one
    position may hold the kernel block sizes (the name ``kernel_block_sizes``
    or a name bound from ``prepare_kernel_block_sizes(...)``), the same in
    each. Releases before 0.22.0 return no kernel block sizes at all
    (position None).
    """
    returns = _returns(definition.node)
    where = f"{path}:{definition.node.lineno}"
    if not returns:
        return f"{definition.qualname} at {where} has no return statement"
    kernel_names = _names_bound_from(definition.node, KERNEL_SIZES_HELPER) | {KERNEL_SIZES_NAME}
    shapes = set()
    for ret in returns:
        if not isinstance(ret.value, ast.Tuple) or any(isinstance(e, ast.Starred) for e in ret.value.elts):
            return f"the return at {path}:{ret.lineno} is not a tuple display"
        positions = [
            i for i, e in enumerate(ret.value.elts) if isinstance(e, ast.Name) and e.id in kernel_names
        ]
        if len(positions) > 1:
            return f"the return at {path}:{ret.lineno} has {len(positions)} kernel-block-size values"
        shapes.add((len(ret.value.elts), positions[0] if positions else None))
    if len(shapes) != 1:
        return f"the returns of {definition.qualname} at {where} differ in shape"
    ((arity, position),) = shapes
    return arity, position, f"{path}:{returns[-1].lineno}"


def _init_attn_backend(ctx: Context, definition: FuncRef | None, args: list[Any],
                       kwargs: dict[str, Any]) -> Any:  # fmt: skip
    """The attention-backend setup: only its kernel block sizes, in the release's own return shape."""
    if definition is None:
        return Unknown(
            "the harness's stand-in for init_attn_backend needs the release's definition to know its "
            "return shape, and the tree has none"
        )
    path = ctx.index.module_of(definition).path
    shape = return_shape(definition, path)
    if isinstance(shape, str):
        return Unknown(f"the harness's stand-in for init_attn_backend cannot take its return shape: {shape}")
    arity, position, where = shape
    ret = next(r for r in _returns(definition.node) if f"{path}:{r.lineno}" == where)
    assert isinstance(ret.value, ast.Tuple)
    items: list[Any] = [
        Unknown(
            f"`{ast.unparse(elt)}` (value {i + 1} of {arity} returned at {where}) is not computed by the "
            "harness's stand-in for init_attn_backend"
        )
        for i, elt in enumerate(ret.value.elts)
    ]
    if position is not None:
        items[position] = kernel_block_sizes(ctx.config)
    origin = f"the harness's stand-in for init_attn_backend (shape read from {where})"
    return StandInTuple(items, origin=origin)


def _prepare_kernel_block_sizes(ctx: Context, definition: FuncRef | None, args: list[Any],
                                kwargs: dict[str, Any]) -> Any:  # fmt: skip
    return kernel_block_sizes(ctx.config)


def _config_only(value: Callable[[RunnerConfig], Any]) -> StandInFn:
    def fn(ctx: Context, definition: FuncRef | None, args: list[Any], kwargs: dict[str, Any]) -> Any:
        return value(ctx.config)

    return fn


# Engine helpers the harness stands in for, by the name they are imported under.
STAND_INS: dict[str, StandInFn] = {
    "init_attn_backend": _init_attn_backend,
    KERNEL_SIZES_HELPER: _prepare_kernel_block_sizes,
    "get_total_cp_world_size": _config_only(lambda c: c.dcp_size),
    "get_dcp_group": _config_only(lambda c: DcpGroup(c.dcp_size)),
    "get_pcp_group": _config_only(lambda c: DcpGroup(1)),
}


def call_stand_in(name: str, ctx: Context, definition: FuncRef | None, args: list[Any],
                  kwargs: dict[str, Any], where: str) -> Any:  # fmt: skip
    """Call the stand-in ``name``; a refusal becomes an Unknown naming the stand-in and the call site."""
    try:
        return STAND_INS[name](ctx, definition, args, kwargs)
    except NotEvaluable as exc:
        return Unknown(f"the harness's stand-in for {name} at {where}: {exc}")


__all__ = ["STAND_INS", "StandInFn", "call_stand_in", "kernel_block_sizes", "return_shape"]
