"""Expressions: names, operators, comparisons, subscripts, comprehensions and truth values."""

from __future__ import annotations

import ast
import operator
from typing import TYPE_CHECKING, Any

from crossattn_sizing.audit.interp.state import (
    Frame,
    KnownFnVal,
    StandInVal,
    arith_ok,
    first_unknown,
    plain,
    same,
    undecided_because,
)
from crossattn_sizing.audit.interp.syntax import BINOPS, CMPOPS, op_text, source_text, unknown_name
from crossattn_sizing.audit.known import KNOWN_FUNCTIONS
from crossattn_sizing.audit.modules import Module
from crossattn_sizing.audit.standins import STAND_INS
from crossattn_sizing.audit.values import (
    EnumMember,
    ExternalName,
    FuncRef,
    GroupVal,
    Instance,
    SpecVal,
    Sym,
    TList,
    Unknown,
)


class Expressions:
    """Evaluates expressions; relies on the other parts of :class:`Interpreter`."""

    if TYPE_CHECKING:  # the other parts' methods and Interpreter's state, reached through ``self``

        follow: bool

        def __getattr__(self, name: str) -> Any: ...

    # -- expressions ----------------------------------------------------------------
    def eval(self, node: ast.expr, frame: Frame) -> Any:
        """The value of ``node`` in ``frame``: an int, a list, a known value, or an unknown saying why."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self._name(node, frame)
        if isinstance(node, ast.Attribute):
            return self.attribute(self.eval(node.value, frame), node.attr)
        if isinstance(node, ast.Call):
            return self._call(node, frame)
        if isinstance(node, ast.BinOp):
            left, right = self.eval(node.left, frame), self.eval(node.right, frame)
            return self._binop(node.op, left, right, frame, node)
        if isinstance(node, ast.UnaryOp):
            return self._unary(node, frame)
        if isinstance(node, ast.BoolOp):
            return self._boolop(node, frame)
        if isinstance(node, ast.Compare):
            return self._compare(node, frame)
        if isinstance(node, ast.IfExp):
            test = self.eval(node.test, frame)
            truth = self._truth(test)
            if truth is True:
                return self.eval(node.body, frame)
            if truth is False:
                return self.eval(node.orelse, frame)
            a, b = self.eval(node.body, frame), self.eval(node.orelse, frame)
            if same(a, b):
                return a
            where = self._where(frame, node)
            return Unknown(f"depends on `{source_text(node.test)}` ({where}){undecided_because(test)}")
        if isinstance(node, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in node.elts):
                return Unknown(f"starred display at {self._where(frame, node)}")
            items = [self.eval(e, frame) for e in node.elts]
            return tuple(items) if isinstance(node, ast.Tuple) else TList(items)
        if isinstance(node, ast.Subscript):
            return self._subscript(node, frame)
        if isinstance(node, ast.Slice):
            parts = [None if p is None else self.eval(p, frame) for p in (node.lower, node.upper, node.step)]
            return Unknown("slice of unknowns") if first_unknown(parts) else slice(*parts)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
            return self._comprehension(node, frame)
        if isinstance(node, ast.NamedExpr):
            value = self.eval(node.value, frame)
            self._assign(node.target, value, frame)
            return value
        return Unknown(f"{type(node).__name__} expression at {self._where(frame, node)}")

    def _name(self, node: ast.Name, frame: Frame) -> Any:
        if node.id in frame.locals:
            return frame.locals[node.id]
        value = self._global(frame.module, node.id)
        if not isinstance(value, Unknown):
            return value
        if node.id in KNOWN_FUNCTIONS:
            return KnownFnVal(node.id, KNOWN_FUNCTIONS[node.id])
        return Unknown(f"name `{node.id}` is not defined ({self._where(frame, node)})")

    def _global(self, module: Module, name: str) -> Any:
        if name in module.imports:
            function = self._function_value(name, self.index.resolve(module, name))
            if function is not None:
                return function
        resolved = self.index.resolve(module, name)
        if resolved is None:
            return Unknown(f"name `{name}` not found in {module.path}")
        return self._materialise(resolved, module, name)

    def _materialise(self, resolved: Any, module: Module, name: str = "") -> Any:
        if isinstance(resolved, (ast.Assign, ast.AnnAssign)):
            key = (module.name, name)
            if key not in self._module_values:
                self._module_values[key] = Unknown(f"module constant {name} (recursive)")
                frame = Frame(module, {})
                saved, self.follow = self.follow, False
                try:
                    value = self.eval(resolved.value, frame) if resolved.value else None
                finally:
                    self.follow = saved
                self._module_values[key] = value
            return self._module_values[key]
        if isinstance(resolved, ExternalName):
            function = self._function_value(resolved.name, resolved)
            if function is not None:
                return function
        return resolved

    def _function_value(self, name: str, resolved: Any) -> KnownFnVal | StandInVal | None:
        """The known function or stand-in an imported ``name`` means, if any.

        A stand-in keeps the release's own definition (when the tree has it)
        so it can take its result's shape from there.
        """
        if name in STAND_INS:
            return StandInVal(name, resolved if isinstance(resolved, FuncRef) else None)
        if name in KNOWN_FUNCTIONS:
            return KnownFnVal(name, KNOWN_FUNCTIONS[name])
        return None

    def _binop(self, op: ast.operator, left: Any, right: Any, frame: Frame, node: ast.AST) -> Any:
        sides = (getattr(node, "left", None), getattr(node, "right", getattr(node, "value", None)))
        for side, expr in zip((left, right), sides, strict=True):
            if isinstance(side, Unknown):
                return side
            if isinstance(side, Sym):
                return Unknown(f"{unknown_name(side, expr)} at {self._where(frame, node)}")
        fn = BINOPS.get(type(op))
        if fn is None or not arith_ok(left, right):
            return Unknown(f"`{op_text(op)}` on {type(left).__name__} and {type(right).__name__} "
                           f"at {self._where(frame, node)}")  # fmt: skip
        try:
            result = fn(left, right)
        except (ZeroDivisionError, TypeError, ValueError, OverflowError) as exc:
            return Unknown(f"{exc} at {self._where(frame, node)}")
        return TList(result) if isinstance(result, list) else result

    def _unary(self, node: ast.UnaryOp, frame: Frame) -> Any:
        value = self.eval(node.operand, frame)
        if isinstance(node.op, ast.Not):
            truth = self._truth(value)
            return Unknown(f"depends on `{source_text(node.operand)}`") if truth is None else not truth
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, Sym):
                return Unknown(f"unknown name `{value.path}` at {self._where(frame, node)}")
            return value if isinstance(value, Unknown) else Unknown(f"unary operator on {value!r}")
        return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}[type(node.op)](  # type: ignore[operator]
            value
        )

    def _boolop(self, node: ast.BoolOp, frame: Frame) -> Any:
        is_and = isinstance(node.op, ast.And)
        unknown: Unknown | None = None
        value: Any = None
        for operand in node.values:
            value = self.eval(operand, frame)
            truth = self._truth(value)
            if truth is None:
                unknown = unknown or Unknown(f"depends on `{source_text(operand)}`{undecided_because(value)}")
                continue
            if truth is not is_and:  # `and` stops at a false value, `or` at a true one
                return value if unknown is None else unknown
        return unknown if unknown is not None else value

    def _compare(self, node: ast.Compare, frame: Frame) -> Any:
        left = self.eval(node.left, frame)
        for op, right_node in zip(node.ops, node.comparators, strict=False):
            right = self.eval(right_node, frame)
            result = self._compare_one(op, left, right, frame, node)
            if result is not True:
                return result
            left = right
        return True

    def _compare_one(self, op: ast.cmpop, left: Any, right: Any, frame: Frame, node: ast.AST) -> Any:
        if isinstance(op, (ast.Is, ast.IsNot)):
            if isinstance(left, EnumMember) and isinstance(right, EnumMember):
                return (left == right) is isinstance(op, ast.Is)
            if left is None or right is None:
                other = right if left is None else left
                if other is None or isinstance(other, (int, str, tuple, TList, Instance, GroupVal, SpecVal)):
                    same = other is None
                    return same if isinstance(op, ast.Is) else not same
            return Unknown(f"depends on `{source_text(node)}`")
        unknown = first_unknown([left, right])
        if unknown is not None:
            return unknown
        if not (plain(left) and plain(right)):
            return Unknown(f"depends on `{source_text(node)}`")
        try:
            if isinstance(op, (ast.In, ast.NotIn)):
                found = left in right
                return found if isinstance(op, ast.In) else not found
            return bool(CMPOPS[type(op)](left, right))
        except (TypeError, KeyError):
            return Unknown(f"comparison at {self._where(frame, node)}")

    def _subscript(self, node: ast.Subscript, frame: Frame) -> Any:
        container = self.eval(node.value, frame)
        index = self.eval(node.slice, frame)
        unknown = first_unknown([container, index])
        if unknown is not None:
            return unknown
        if isinstance(container, (list, tuple, dict)) and isinstance(index, (int, slice, str)):
            try:
                result = container[index]  # type: ignore[index]  # a wrong pairing raises TypeError
            except (IndexError, KeyError, TypeError):
                return Unknown(f"index {index!r} out of range at {self._where(frame, node)}")
            return TList(result) if isinstance(result, list) else result
        if isinstance(container, Sym):
            return Unknown(f"unknown name `{container.path}` subscripted at {self._where(frame, node)}")
        return Unknown(f"subscript of {type(container).__name__} at {self._where(frame, node)}")

    def _comprehension(self, node: ast.ListComp | ast.GeneratorExp, frame: Frame) -> Any:
        scope = Frame(frame.module, dict(frame.locals), frame.owner)
        results: list[Any] = []

        def walk(generators: list[ast.comprehension]) -> Unknown | None:
            if not generators:
                results.append(self.eval(node.elt, scope))
                return None
            gen, rest = generators[0], generators[1:]
            items = self._iterate(self.eval(gen.iter, scope))
            if isinstance(items, Unknown):
                return items
            for item in items:
                self._assign(gen.target, item, scope)
                keep = True
                for cond in gen.ifs:
                    truth = self._truth(self.eval(cond, scope))
                    if truth is None:
                        return Unknown(f"depends on `{source_text(cond)}`")
                    keep = keep and truth
                if keep:
                    failed = walk(rest)
                    if failed is not None:
                        return failed
            return None

        failed = walk(node.generators)
        if failed is not None:
            self._note_skipped([node], frame, failed)
            return failed
        return TList(results) if isinstance(node, ast.ListComp) else tuple(results)

    def _iterate(self, value: Any) -> list[Any] | Unknown:
        if isinstance(value, Unknown):
            return value
        if isinstance(value, TList) and value.poison is not None:
            return value.poison
        if isinstance(value, (list, tuple, range)):
            return list(value)
        if isinstance(value, dict):
            return list(value)
        if isinstance(value, Sym):
            return Unknown(f"iterating over unknown `{value.path}`")
        return Unknown(f"iterating over {type(value).__name__}")

    def _truth(self, value: Any) -> bool | None:
        if isinstance(value, (Unknown, Sym, ExternalName)):
            return None
        if isinstance(value, TList) and value.poison is not None:
            return None
        if isinstance(value, tuple) and first_unknown(value):
            return None
        if value is None or isinstance(value, (bool, int, str, list, tuple, dict, range)):
            return bool(value)
        return True

