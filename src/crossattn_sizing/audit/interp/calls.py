"""Calls: which functions are entered, argument binding, known functions and list methods.

A call to a function of the tree is entered only when it builds a block table
or is a short helper whose result is used; anything else yields an Unknown.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from crossattn_sizing.audit.interp.state import (
    MAX_DEPTH,
    SHORT_FUNCTION_STATEMENTS,
    Allocation,
    Frame,
    KnownFnVal,
    ListMethod,
    StandInVal,
    first_unknown,
    is_table_class,
)
from crossattn_sizing.audit.interp.syntax import (
    allocation_width,
    decorator_name,
    source_text,
    statement_count,
    unknown_name,
)
from crossattn_sizing.audit.known import ARITHMETIC, KNOWN_FUNCTIONS, NotEvaluable
from crossattn_sizing.audit.modules import Module
from crossattn_sizing.audit.standins import STAND_INS, call_stand_in
from crossattn_sizing.audit.values import (
    BoundMethod,
    ClassRef,
    FuncRef,
    Instance,
    SuperVal,
    Sym,
    TList,
    Unknown,
)


class Calls:
    """Evaluates calls; relies on the other parts of :class:`Interpreter`."""

    if TYPE_CHECKING:  # the other parts' methods and Interpreter's state, reached through ``self``

        def __getattr__(self, name: str) -> Any: ...

    def _call(self, node: ast.Call, frame: Frame) -> Any:
        statement = id(node) in self._stmt_calls
        if is_table_class(frame.owner):
            width = allocation_width(node)
            if width is not None:
                value = self.eval(width, frame)
                self.allocations.append(
                    Allocation(value, self._where(frame, node), tuple(self._conditions), frame.owner)
                )
                return Unknown(f"tensor allocated at {self._where(frame, node)}")
        if isinstance(node.func, ast.Name) and node.func.id == "super" and not node.args:
            if frame.owner is None or frame.self_value is None:
                return Unknown(f"super() outside a method at {self._where(frame, node)}")
            return SuperVal(frame.owner, frame.self_value)
        func = self.eval(node.func, frame)
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return Unknown(f"call with *args/**kwargs at {self._where(frame, node)}")
        args = [self.eval(a, frame) for a in node.args]
        kwargs = {k.arg: self.eval(k.value, frame) for k in node.keywords if k.arg}
        if isinstance(func, KnownFnVal):
            return self._known(func, args, kwargs, frame, node)
        if isinstance(func, StandInVal):
            return call_stand_in(func.name, self, func.definition, args, kwargs, self._where(frame, node))
        if isinstance(func, ListMethod):
            return self._list_method(func, args, frame, node)
        if isinstance(func, BoundMethod):
            return self._invoke(func.func, args, kwargs, func.instance, statement)
        if isinstance(func, FuncRef):
            return self._invoke(func, args, kwargs, None, statement)
        if isinstance(func, ClassRef):
            return self._construct(func, args, kwargs, statement)
        if isinstance(func, Unknown):
            return func
        shown = func.path if isinstance(func, Sym) else source_text(node.func)
        return Unknown(f"call to {shown}() at {self._where(frame, node)} is not evaluated")

    def _known(self, func: KnownFnVal, args: list[Any], kwargs: dict[str, Any], frame: Frame,
               node: ast.Call) -> Any:  # fmt: skip
        if func.name.rpartition(".")[2] in ARITHMETIC:
            exprs = [*node.args, *(k.value for k in node.keywords)]
            for value, expr in zip([*args, *kwargs.values()], exprs, strict=False):
                if isinstance(value, Sym):
                    return Unknown(
                        f"{unknown_name(value, expr)} in {func.name}(...) at {self._where(frame, node)}"
                    )
        unknown = first_unknown([*args, *kwargs.values()])
        if unknown is not None and func.name != "getattr":
            return unknown
        try:
            return func.fn(self, args, kwargs)
        except NotEvaluable as exc:
            return Unknown(f"{func.name}(...) at {self._where(frame, node)}: {exc}")
        except (TypeError, ValueError, ZeroDivisionError) as exc:
            return Unknown(f"{func.name}(...) at {self._where(frame, node)}: {exc}")

    def _list_method(self, method: ListMethod, args: list[Any], frame: Frame, node: ast.Call) -> Any:
        target = method.target
        if method.name in ("copy", "index", "count"):
            if target.poison is not None:
                return target.poison
            try:
                return TList(target) if method.name == "copy" else getattr(target, method.name)(*args)
            except (TypeError, ValueError) as exc:
                return Unknown(f"list.{method.name} at {self._where(frame, node)}: {exc}")
        self._touch(target)
        try:
            if method.name == "extend":
                items = self._iterate(args[0])
                if isinstance(items, Unknown):
                    target.poison = items
                    return None
                target.extend(items)
                return None
            return getattr(list, method.name)(target, *args)
        except (TypeError, ValueError, IndexError) as exc:
            target.poison = Unknown(f"list.{method.name} at {self._where(frame, node)}: {exc}")
            return target.poison

    def _invoke(self, func: FuncRef, args: list[Any], kwargs: dict[str, Any], self_value: Any,
                statement: bool) -> Any:  # fmt: skip
        if not self._should_follow(func, statement):
            if self.follow and self._builds_table(func, 0):
                self.skipped.append(f"{func.qualname}, which builds a block table, is nested too deep")
            return Unknown(f"call to {func.qualname}() is not followed")
        decorators = {decorator_name(d) for d in func.node.decorator_list}
        if "staticmethod" in decorators:
            self_value = None
        return self.call(func, args, kwargs, self_value)

    def _construct(self, cls: ClassRef, args: list[Any], kwargs: dict[str, Any], statement: bool) -> Any:
        init = self.index.find_method(cls, "__init__")
        if init is None or not self._should_follow(init, statement, cls):
            return Unknown(f"{cls.name}(...) is not followed")
        instance = Instance(cls)
        self.call(init, args, kwargs, instance)
        return instance

    def _note_skipped(self, body: list[ast.AST], frame: Frame, why: Unknown) -> None:
        """Record ``why`` when ``body`` (statements or an expression), not evaluated, builds a block table."""
        if not self.follow:
            return
        for stmt in body:
            for node in ast.walk(stmt):
                if not isinstance(node, ast.Call):
                    continue
                target = self._static_callee(node.func, frame.module, frame.owner)
                if is_table_class(frame.owner) and allocation_width(node) is not None:
                    builds = True
                elif isinstance(target, ClassRef):
                    init = self.index.find_method(target, "__init__")
                    builds = is_table_class(target) or (init is not None and self._builds_table(init, 0))
                else:
                    builds = isinstance(target, FuncRef) and self._builds_table(target, 0)
                if builds:
                    self.skipped.append(
                        f"the call at {self._where(frame, node)}, which builds a block table, is not "
                        f"evaluated: {why.reason}"
                    )
                    return

    def _should_follow(self, func: FuncRef, statement: bool, cls: ClassRef | None = None) -> bool:
        """Enter only what builds a block table, and small helpers whose result is used."""
        if not self.follow or self._depth >= MAX_DEPTH:
            return False
        if is_table_class(cls or func.owner) or self._builds_table(func, 0):
            return True
        return not statement and statement_count(func.node) <= SHORT_FUNCTION_STATEMENTS

    def _builds_table(self, func: FuncRef, depth: int) -> bool:
        key = (func.module, func.node.lineno)
        if key in self._builds:
            return self._builds[key]
        self._builds[key] = False  # cycles
        module = self.index.module_of(func)
        found = False
        for node in ast.walk(func.node):
            if not isinstance(node, ast.Call):
                continue
            target = self._static_callee(node.func, module, func.owner)
            if isinstance(target, ClassRef):
                if is_table_class(target):
                    found = True
                else:
                    init = self.index.find_method(target, "__init__")
                    found = init is not None and depth < 4 and self._builds_table(init, depth + 1)
            elif isinstance(target, FuncRef) and depth < 4:
                found = self._builds_table(target, depth + 1)
            if found:
                break
        self._builds[key] = found
        return found

    def _static_callee(self, node: ast.expr, module: Module, owner: ClassRef | None) -> Any:
        if isinstance(node, ast.Name):
            if node.id in KNOWN_FUNCTIONS or node.id in STAND_INS:
                return None
            return self.index.resolve(module, node.id)
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and owner is not None
        ):
            return self.index.find_method(owner, node.attr)
        return None

    def _bind(
        self, func: FuncRef, args: list[Any], kwargs: dict[str, Any], self_value: Any
    ) -> dict[str, Any]:
        spec = func.node.args
        positional = [a.arg for a in spec.posonlyargs + spec.args]
        given = ([self_value] if self_value is not None else []) + list(args)
        bound: dict[str, Any] = dict(zip(positional, given, strict=False))
        if spec.vararg is not None:
            bound[spec.vararg.arg] = tuple(given[len(positional) :])
        extra: dict[str, Any] = {}
        kwonly = [a.arg for a in spec.kwonlyargs]
        for name, value in kwargs.items():
            if name in positional or name in kwonly:
                bound[name] = value
            else:
                extra[name] = value
        if spec.kwarg is not None:
            bound[spec.kwarg.arg] = extra
        module = self.index.module_of(func)
        defaults = dict(zip(positional[len(positional) - len(spec.defaults) :], spec.defaults, strict=False))
        kw_defaults = zip(spec.kwonlyargs, spec.kw_defaults, strict=False)
        defaults.update({a.arg: d for a, d in kw_defaults if d is not None})
        for name in positional + kwonly:
            if name in bound:
                continue
            if name in defaults:
                bound[name] = self.eval(defaults[name], Frame(module, {}))
            else:
                bound[name] = Unknown(f"argument {name} of {func.qualname} not passed")
        return bound

