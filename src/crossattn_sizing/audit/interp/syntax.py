"""Syntax-tree helpers: operator tables, source text for messages, allocation shapes."""

from __future__ import annotations

import ast
import copy
import operator
from collections.abc import Iterable

from crossattn_sizing.audit.values import Sym

BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.Div: operator.truediv,
}  # fmt: skip


CMPOPS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}  # fmt: skip


LIST_METHODS = ("append", "extend", "insert", "pop", "clear", "remove", "reverse", "sort")


_TEXTS: dict[int, tuple[ast.AST, str]] = {}


def source_text(node: ast.AST) -> str:
    """``ast.unparse`` memoised per node: messages re-render the same conditions per config."""
    cached = _TEXTS.get(id(node))
    if cached is None or cached[0] is not node:
        cached = (node, ast.unparse(node))
        _TEXTS[id(node)] = cached
    return cached[1]


def unknown_name(sym: Sym, expr: ast.expr | None) -> str:
    """The "unknown name" phrase, adding where the engine object came from when that differs."""
    shown = source_text(expr) if expr is not None else sym.path
    return f"unknown name `{shown}`" + ("" if shown == sym.path else f" (= {sym.path})")


def walk_no_defs(node: ast.AST) -> Iterable[ast.AST]:
    """The nodes of ``node``, not descending into nested functions, classes or lambdas."""
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield from walk_no_defs(child)


def as_load(target: ast.expr) -> ast.expr:
    """A copy of an assignment target that reads it (for ``x += 1``)."""
    node = copy.deepcopy(target)
    for sub in ast.walk(node):
        if hasattr(sub, "ctx"):
            sub.ctx = ast.Load()
    return node


def decorator_name(node: ast.expr) -> str:
    """The last name of a decorator (``functools.cache`` -> ``cache``), called or not."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def ends_with_max_num_reqs(node: ast.expr) -> bool:
    """Whether ``node`` is ``max_num_reqs`` (a name or an attribute): a table's first dimension."""
    return (isinstance(node, ast.Name) and node.id == "max_num_reqs") or (
        isinstance(node, ast.Attribute) and node.attr == "max_num_reqs"
    )


def allocation_width(node: ast.Call) -> ast.expr | None:
    """The row-width expression of a ``(max_num_reqs, W)`` allocation, if the call is one."""
    args = node.args
    if args and isinstance(args[0], (ast.Tuple, ast.List)) and len(args[0].elts) == 2:
        first, second = args[0].elts
        if ends_with_max_num_reqs(first):
            return second
    if len(args) >= 2 and ends_with_max_num_reqs(args[0]) and not isinstance(args[1], ast.Starred):
        return args[1]
    return None


def op_text(op: ast.operator) -> str:
    """An arithmetic operator as source text, for the reasons an unknown carries."""
    return {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}.get(
        type(op), type(op).__name__
    )


_STATEMENT_COUNTS: dict[int, tuple[ast.AST, int]] = {}


def statement_count(node: ast.FunctionDef) -> int:
    """Statements in a function, nested ones included, its docstring not (memoised per node)."""
    cached = _STATEMENT_COUNTS.get(id(node))
    if cached is None or cached[0] is not node:
        count = sum(isinstance(n, ast.stmt) for n in ast.walk(node)) - 1
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            count -= 1
        cached = (node, count)
        _STATEMENT_COUNTS[id(node)] = cached
    return cached[1]
