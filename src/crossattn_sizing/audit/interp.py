"""A restricted evaluator for the engine's sizing code, over its syntax tree.

It executes statements of the runner's ``initialize_kv_cache`` and of the
block-table classes it builds, but only computes with ints, lists of the
audited config's groups and names :mod:`.known` maps to config fields. It
never imports or calls engine code: a call to anything else yields an
:class:`Unknown`, and so does anything computed from one. Whatever is assigned
under a condition it cannot decide is merged: equal on both paths, or unknown
("depends on `cond`"). So a width comes out as an int only when every input
to it was known, and otherwise as the reason it is not.

A block table is recognised by where it is allocated: inside a class whose
name contains ``BlockTable``, a call shaped ``f((max_num_reqs, W), ...)`` or
``f(max_num_reqs, W, ...)`` allocates one table of row width ``W``.
"""

from __future__ import annotations

import ast
import copy
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from crossattn_sizing.audit.known import (
    ARITHMETIC,
    CONFIG_ATTRS,
    CONFIG_ONLY,
    KIND_SPEC_CLASS,
    KNOWN_FUNCTIONS,
    KNOWN_QUALIFIED,
    SPEC_DATA_ATTRS,
    SPEC_MODULE,
    DcpGroup,
    KnownFn,
    NotEvaluable,
    spec_attr,
)
from crossattn_sizing.audit.modules import ModRef, Module, ModuleIndex, _absolute
from crossattn_sizing.audit.values import (
    BoundMethod,
    ClassRef,
    ExternalName,
    FuncRef,
    GroupVal,
    Instance,
    SpecVal,
    SuperVal,
    Sym,
    TList,
    Unknown,
)
from crossattn_sizing.config import RunnerConfig

TABLE_MARKER = "BlockTable"
MAX_DEPTH = 12
SHORT_FUNCTION_LINES = 30
_MISSING = object()

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_, ast.BitXor: operator.xor, ast.Div: operator.truediv,
}  # fmt: skip
_CMPOPS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}  # fmt: skip
_LIST_METHODS = ("append", "extend", "insert", "pop", "clear", "remove", "reverse", "sort")


class ReadError(Exception):
    """The sizing could not be read; the message names what was not found or not known."""


@dataclass(frozen=True)
class KnownFnVal:
    """A known function as a value (so ``f = cdiv; f(a, b)`` works too)."""

    name: str
    fn: KnownFn


@dataclass(frozen=True)
class ListMethod:
    """``lst.append`` and friends, bound to an evaluator-built list."""

    target: TList
    name: str


@dataclass(frozen=True)
class Allocation:
    """One block table the source allocates: its row width, where, and the class allocating it."""

    width: Any
    where: str
    conditions: tuple[str, ...]
    owner: ClassRef | None = None


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class _Raise(Exception):
    def __init__(self, where: str) -> None:
        self.where = where


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


@dataclass
class Frame:
    """One function activation: its module (for globals), locals and owner class."""

    module: Module
    locals: dict[str, Any]
    owner: ClassRef | None = None
    self_value: Any = None
    pending_returns: list[Any] = field(default_factory=list)
    loop_taint: Unknown | None = None


def is_table_class(cls: ClassRef | None) -> bool:
    return cls is not None and TABLE_MARKER in cls.name


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, Unknown) or isinstance(b, Unknown) or type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=False))
    try:
        return bool(a == b)
    except Exception:  # comparing opaque values: treat as different
        return False


def _first_unknown(values: Iterable[Any]) -> Unknown | None:
    for v in values:
        if isinstance(v, Unknown):
            return v
        if isinstance(v, TList) and v.poison is not None:
            return v.poison
    return None


class Interpreter:
    """Evaluates sizing code for one RunnerConfig.

    ``follow=False`` evaluates a body without entering any called function
    (used for the runner's ``__init__``, which builds many unrelated things).
    """

    def __init__(self, index: ModuleIndex, config: RunnerConfig, *, budget: int = 400_000) -> None:
        self.index = index
        self.config = config
        self.follow = True
        self.allocations: list[Allocation] = []
        self._conditions: list[str] = []
        self._journals: list[list[tuple[Any, ...]]] = []
        self._steps = 0
        self._budget = budget
        self._depth = 0
        self._stmt_calls: set[int] = set()
        self._module_values: dict[tuple[str, str], Any] = {}
        # Whether a function builds a table depends on the source only: share it per index.
        self._builds: dict[tuple[str, int], bool] = index.__dict__.setdefault("_builds_table_memo", {})

    # -- public entry points -------------------------------------------------
    def call(self, func: FuncRef, args: list[Any], kwargs: dict[str, Any], self_value: Any = None) -> Any:
        """Call ``func`` as the engine would, returning its (possibly unknown) result."""
        module = self.index.module_of(func)
        frame = Frame(module, self._bind(func, args, kwargs, self_value), func.owner, self_value)
        self._depth += 1
        try:
            self.exec_block(func.node.body, frame)
            result: Any = None
        except _Return as ret:
            result = ret.value
        finally:
            self._depth -= 1
        for other in frame.pending_returns:
            if not _same(result, other):
                return Unknown(f"{func.qualname} returns different values on different paths")
        return result

    def run_init(self, instance: Instance, args: list[Any], kwargs: dict[str, Any]) -> None:
        """Evaluate a class's ``__init__`` statement by statement, entering no calls."""
        init = self.index.find_method(instance.cls, "__init__")
        if init is None:
            return
        saved, self.follow = self.follow, False
        frame = Frame(self.index.module_of(init), self._bind(init, args, kwargs, instance), init.owner)
        try:
            for stmt in init.node.body:
                try:
                    self.exec_stmt(stmt, frame)
                except (_Raise, _Break, _Continue):
                    self._poison_targets([stmt], frame, Unknown(f"raised at {self._where(frame, stmt)}"))
                except _Return:
                    break
        finally:
            self.follow = saved

    def attribute(self, obj: Any, name: str) -> Any:
        """``obj.name`` under the audit's rules (also used by the ``getattr`` known function)."""
        if isinstance(obj, Unknown):
            return obj
        if isinstance(obj, ExternalName):
            obj = Sym(f"{obj.module}.{obj.name}" if obj.name else obj.module)
        if isinstance(obj, Sym):
            qualified = f"{obj.path}.{name}"
            if qualified in KNOWN_QUALIFIED:
                return KnownFnVal(qualified, KNOWN_QUALIFIED[qualified])
            if name in CONFIG_ATTRS:
                return CONFIG_ATTRS[name](self.config)
            return Sym(qualified)
        if isinstance(obj, ModRef):
            module = self.index.module(obj.name)
            if module is not None:
                return self._global(module, name)
            return Unknown(f"module {obj.name} not in the tree")
        if isinstance(obj, GroupVal):
            if name == "kv_cache_spec":
                return SpecVal(obj.group)
            return Unknown(f"kv_cache_group.{name} has no counterpart in the harness config")
        if isinstance(obj, SpecVal):
            return self._spec_attribute(obj, name)
        if isinstance(obj, SuperVal):
            return self._super_attribute(obj, name)
        if isinstance(obj, Instance):
            return self._instance_attribute(obj, name)
        if isinstance(obj, DcpGroup):
            return getattr(obj, name, Unknown(f"get_dcp_group().{name}"))
        if isinstance(obj, TList) and name in (*_LIST_METHODS, "copy", "index", "count"):
            return ListMethod(obj, name)
        return Unknown(f"attribute {name} of {type(obj).__name__}")

    # -- statements ------------------------------------------------------------
    def exec_block(self, body: list[ast.stmt], frame: Frame) -> None:
        for stmt in body:
            self.exec_stmt(stmt, frame)

    def exec_stmt(self, stmt: ast.stmt, frame: Frame) -> None:
        self._steps += 1
        if self._steps > self._budget:
            raise ReadError(f"evaluation budget exceeded at {self._where(frame, stmt)}")
        if isinstance(stmt, ast.Assign):
            value = self.eval(stmt.value, frame)
            for target in stmt.targets:
                self._assign(target, value, frame)
        elif isinstance(stmt, ast.AnnAssign):
            if stmt.value is not None:
                self._assign(stmt.target, self.eval(stmt.value, frame), frame)
        elif isinstance(stmt, ast.AugAssign):
            load = _as_load(stmt.target)
            value = self._binop(stmt.op, self.eval(load, frame), self.eval(stmt.value, frame), frame, stmt)
            self._assign(stmt.target, value, frame)
        elif isinstance(stmt, ast.Expr):
            if isinstance(stmt.value, ast.Call):
                self._stmt_calls.add(id(stmt.value))
            self.eval(stmt.value, frame)
        elif isinstance(stmt, ast.If):
            self._exec_if(stmt, frame)
        elif isinstance(stmt, ast.For):
            self._exec_for(stmt, frame)
        elif isinstance(stmt, ast.While):
            self._poison_targets(stmt.body, frame, Unknown(f"while loop at {self._where(frame, stmt)}"))
        elif isinstance(stmt, ast.Return):
            raise _Return(None if stmt.value is None else self.eval(stmt.value, frame))
        elif isinstance(stmt, ast.Raise):
            raise _Raise(self._where(frame, stmt))
        elif isinstance(stmt, ast.Break):
            raise _Break()
        elif isinstance(stmt, ast.Continue):
            raise _Continue()
        elif isinstance(stmt, ast.With):
            self.exec_block(stmt.body, frame)
        elif isinstance(stmt, ast.Try):
            self._exec_try(stmt, frame)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            self._exec_import(stmt, frame)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self._write(frame.locals, stmt.name, Unknown(f"local definition {stmt.name}"))
        elif isinstance(stmt, ast.Delete):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    self._write(frame.locals, target.id, Unknown(f"{target.id} was deleted"))
        # pass, assert, global, nonlocal and the rest change nothing the sizing reads

    def _exec_if(self, stmt: ast.If, frame: Frame) -> None:
        test = self.eval(stmt.test, frame)
        truth = self._truth(test)
        if truth is True:
            self.exec_block(stmt.body, frame)
        elif truth is False:
            self.exec_block(stmt.orelse, frame)
        else:
            self._branch(_text(stmt.test), stmt.body, stmt.orelse, frame, stmt)

    def _branch(self, text: str, body: list[ast.stmt], orelse: list[ast.stmt], frame: Frame,
                stmt: ast.stmt) -> None:  # fmt: skip
        """Both paths of an undecidable ``if``; what they leave different becomes unknown."""
        outcomes = []
        for label, block in ((text, body), (f"not ({text})", orelse)):
            self._journals.append([])
            self._conditions.append(label)
            kind, value = "fall", None
            try:
                self.exec_block(block, frame)
            except _Return as ret:
                kind, value = "return", ret.value
            except _Raise:
                kind = "raise"
            except (_Break, _Continue):
                kind = "jump"
            finally:
                self._conditions.pop()
                entries = self._journals.pop()
            outcomes.append((kind, value, _capture(entries)))
            _undo(entries)
        live = [o for o in outcomes if o[0] in ("fall", "return", "jump")]
        if not live:
            raise _Raise(self._where(frame, stmt))
        reason = Unknown(f"depends on `{text}` ({self._where(frame, stmt)})")
        if any(o[0] == "jump" for o in outcomes):
            frame.loop_taint = reason
        for kind, value, _ in live:
            if kind == "return" and len(live) > 1:
                frame.pending_returns.append(value)
        self._merge([o[2] for o in live], reason, frame, drop_locals_of=[o[0] != "fall" for o in live])
        if all(o[0] == "return" for o in live):
            raise _Return(frame.pending_returns.pop() if frame.pending_returns else live[0][1])

    def _merge(self, captures: list[dict[Any, Any]], reason: Unknown, frame: Frame,
               drop_locals_of: list[bool]) -> None:  # fmt: skip
        keys: dict[Any, Any] = {}
        for cap in captures:
            keys.update({k: v[0] for k, v in cap.items()})
        for key, (kind, container, name) in keys.items():
            values = []
            for cap, dropped in zip(captures, drop_locals_of, strict=False):
                if dropped and container is frame.locals:
                    continue
                if key in cap:
                    values.append(cap[key][1])
                else:
                    values.append(_current(kind, container, name))
            if not values:
                continue
            if kind == "dict":
                merged = values[0] if all(_same(values[0], v) for v in values[1:]) else reason
                if merged is _MISSING:
                    continue
                self._write(container, name, merged)
            else:
                first = values[0]
                if all(_same(first, v) for v in values[1:]):
                    self._touch(container)
                    container[:] = first[0]
                    container.poison = first[1]
                else:
                    self._touch(container)
                    container.poison = reason

    def _exec_for(self, stmt: ast.For, frame: Frame) -> None:
        iterable = self.eval(stmt.iter, frame)
        items = self._iterate(iterable)
        if isinstance(items, Unknown):
            self._poison_targets([stmt], frame, items)
            return
        outer, frame.loop_taint = frame.loop_taint, None
        broke = False
        for item in items:
            self._assign(stmt.target, item, frame)
            try:
                self.exec_block(stmt.body, frame)
            except _Break:
                broke = True
                break
            except _Continue:
                continue
        if not broke:
            self.exec_block(stmt.orelse, frame)
        taint, frame.loop_taint = frame.loop_taint, outer
        if taint is not None:
            self._poison_targets(stmt.body, frame, taint)

    def _exec_try(self, stmt: ast.Try, frame: Frame) -> None:
        try:
            self.exec_block(stmt.body, frame)
        except _Raise as exc:
            if not stmt.handlers:
                raise
            why = Unknown(f"exception handling at {exc.where}")
            self._poison_targets(stmt.body, frame, why)
            for handler in stmt.handlers:
                self._poison_targets(handler.body, frame, why)
        else:
            self.exec_block(stmt.orelse, frame)
        self.exec_block(stmt.finalbody, frame)

    def _exec_import(self, stmt: ast.Import | ast.ImportFrom, frame: Frame) -> None:
        for alias in stmt.names:
            if isinstance(stmt, ast.ImportFrom):
                source = _absolute(frame.module, stmt.module, stmt.level)
                name = alias.asname or alias.name
                if alias.name in KNOWN_FUNCTIONS:
                    value: Any = KnownFnVal(alias.name, KNOWN_FUNCTIONS[alias.name])
                else:
                    value = self.index._resolve_import(source, alias.name, 0)
            else:
                name = alias.asname or alias.name.split(".")[0]
                value = Sym(alias.name if alias.asname else name)
            self._write(frame.locals, name, self._materialise(value, frame.module))

    # -- assignment and journalling -----------------------------------------------
    def _assign(self, target: ast.expr, value: Any, frame: Frame) -> None:
        if isinstance(target, ast.Name):
            self._write(frame.locals, target.id, value)
        elif isinstance(target, ast.Attribute):
            obj = self.eval(target.value, frame)
            if isinstance(obj, Instance):
                self._write(obj.attrs, target.attr, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in target.elts):
                values: list[Any] = [Unknown("starred assignment")] * len(target.elts)
            elif isinstance(value, (tuple, list)) and not _first_unknown([value]):
                if len(value) != len(target.elts):
                    values = [Unknown(f"unpacking {len(value)} values into {len(target.elts)}")] * len(
                        target.elts
                    )
                else:
                    values = list(value)
            else:
                why = value if isinstance(value, Unknown) else Unknown("unpacking an unknown value")
                values = [why] * len(target.elts)
            for elt, v in zip(target.elts, values, strict=False):
                self._assign(elt, v, frame)
        elif isinstance(target, ast.Subscript):
            container = self.eval(target.value, frame)
            index = self.eval(target.slice, frame)
            if isinstance(container, TList):
                self._touch(container)
                if isinstance(index, int) and -len(container) <= index < len(container):
                    container[index] = value
                else:
                    container.poison = Unknown(f"item assignment at {self._where(frame, target)}")

    def _write(self, container: dict[str, Any], key: str, value: Any) -> None:
        if self._journals:
            self._journals[-1].append(("dict", container, key, container.get(key, _MISSING)))
        container[key] = value

    def _touch(self, lst: TList) -> None:
        if self._journals:
            self._journals[-1].append(("list", lst, None, (list(lst), lst.poison)))

    def _poison_targets(self, body: list[ast.stmt], frame: Frame, why: Unknown) -> None:
        """Everything ``body`` could assign or append to becomes ``why``."""
        for stmt in body:
            for node in _walk_no_defs(stmt):
                if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and isinstance(
                    node.ctx, ast.Store
                ):
                    self._assign(node, why, frame)
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in _LIST_METHODS
                ):
                    target = self._quiet_eval(node.func.value, frame)
                    if isinstance(target, TList):
                        self._touch(target)
                        target.poison = why

    def _quiet_eval(self, node: ast.expr, frame: Frame) -> Any:
        saved, self.follow = self.follow, False
        try:
            return self.eval(node, frame)
        finally:
            self.follow = saved

    # -- expressions ----------------------------------------------------------------
    def eval(self, node: ast.expr, frame: Frame) -> Any:
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
            truth = self._truth(self.eval(node.test, frame))
            if truth is True:
                return self.eval(node.body, frame)
            if truth is False:
                return self.eval(node.orelse, frame)
            a, b = self.eval(node.body, frame), self.eval(node.orelse, frame)
            return a if _same(a, b) else Unknown(f"depends on `{_text(node.test)}`")
        if isinstance(node, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in node.elts):
                return Unknown(f"starred display at {self._where(frame, node)}")
            items = [self.eval(e, frame) for e in node.elts]
            return tuple(items) if isinstance(node, ast.Tuple) else TList(items)
        if isinstance(node, ast.Subscript):
            return self._subscript(node, frame)
        if isinstance(node, ast.Slice):
            parts = [None if p is None else self.eval(p, frame) for p in (node.lower, node.upper, node.step)]
            return Unknown("slice of unknowns") if _first_unknown(parts) else slice(*parts)
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
        if name in module.imports and name in KNOWN_FUNCTIONS:
            return KnownFnVal(name, KNOWN_FUNCTIONS[name])
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
        if isinstance(resolved, ExternalName) and resolved.name in KNOWN_FUNCTIONS:
            return KnownFnVal(resolved.name, KNOWN_FUNCTIONS[resolved.name])
        return resolved

    def _bound(self, obj: Any, method: FuncRef) -> Any:
        """``obj.method``: a bound method, or the value of a property."""
        decorators = {_decorator_name(d) for d in method.node.decorator_list}
        if decorators & {"property", "cached_property"}:
            return self._invoke(method, [], {}, obj, statement=False)
        return BoundMethod(obj, method)

    def _spec_attribute(self, spec: SpecVal, name: str) -> Any:
        if name in SPEC_DATA_ATTRS:
            return spec_attr(self.config, spec, name)
        module = self.index.module(SPEC_MODULE)
        cls = self.index.resolve(module, KIND_SPEC_CLASS[spec.group.kind]) if module else None
        method = self.index.find_method(cls, name) if isinstance(cls, ClassRef) else None
        if method is None:
            return spec_attr(self.config, spec, name)
        return self._bound(spec, method)

    def _super_attribute(self, sup: SuperVal, name: str) -> Any:
        module = self.index.module_of(sup.owner)
        for base in sup.owner.node.bases:
            base_ref = self.index.resolve(module, base.id) if isinstance(base, ast.Name) else None
            method = self.index.find_method(base_ref, name) if isinstance(base_ref, ClassRef) else None
            if method is not None:
                return self._bound(sup.instance, method)
        return Unknown(f"super().{name} of {sup.owner.name} is not in the tree")

    def _instance_attribute(self, obj: Instance, name: str) -> Any:
        if name in obj.attrs:
            return obj.attrs[name]
        method = self.index.find_method(obj.cls, name)
        if method is not None:
            return self._bound(obj, method)
        if obj.config_fallback:
            if name in CONFIG_ATTRS:
                return CONFIG_ATTRS[name](self.config)
            return Sym(f"self.{name}")
        return Unknown(f"{obj.cls.name}.{name} is not set where the audit can see it")

    def _call(self, node: ast.Call, frame: Frame) -> Any:
        statement = id(node) in self._stmt_calls
        if is_table_class(frame.owner):
            width = _allocation_width(node)
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
        shown = func.path if isinstance(func, Sym) else _text(node.func)
        return Unknown(f"call to {shown}() at {self._where(frame, node)} is not evaluated")

    def _known(self, func: KnownFnVal, args: list[Any], kwargs: dict[str, Any], frame: Frame,
               node: ast.Call) -> Any:  # fmt: skip
        if func.name in CONFIG_ONLY:
            return func.fn(self, args, kwargs)
        if func.name.rpartition(".")[2] in ARITHMETIC:
            exprs = [*node.args, *(k.value for k in node.keywords)]
            for value, expr in zip([*args, *kwargs.values()], exprs, strict=False):
                if isinstance(value, Sym):
                    return Unknown(
                        f"{_unknown_name(value, expr)} in {func.name}(...) at {self._where(frame, node)}"
                    )
        unknown = _first_unknown([*args, *kwargs.values()])
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
            return Unknown(f"call to {func.qualname}() is not followed")
        decorators = {_decorator_name(d) for d in func.node.decorator_list}
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

    def _should_follow(self, func: FuncRef, statement: bool, cls: ClassRef | None = None) -> bool:
        """Enter only what builds a block table, and small helpers whose result is used."""
        if not self.follow or self._depth >= MAX_DEPTH:
            return False
        if is_table_class(cls or func.owner) or self._builds_table(func, 0):
            return True
        lines = (func.node.end_lineno or func.node.lineno) - func.node.lineno + 1
        return not statement and lines <= SHORT_FUNCTION_LINES

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
            if node.id in KNOWN_FUNCTIONS:
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

    def _binop(self, op: ast.operator, left: Any, right: Any, frame: Frame, node: ast.AST) -> Any:
        sides = (getattr(node, "left", None), getattr(node, "right", getattr(node, "value", None)))
        for side, expr in zip((left, right), sides, strict=True):
            if isinstance(side, Unknown):
                return side
            if isinstance(side, Sym):
                return Unknown(f"{_unknown_name(side, expr)} at {self._where(frame, node)}")
        fn = _BINOPS.get(type(op))
        if fn is None or not _arith_ok(left, right):
            return Unknown(f"`{_op_text(op)}` on {type(left).__name__} and {type(right).__name__} "
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
            return Unknown(f"depends on `{_text(node.operand)}`") if truth is None else not truth
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, Sym):
                return Unknown(f"unknown name `{value.path}` at {self._where(frame, node)}")
            return value if isinstance(value, Unknown) else Unknown(f"unary operator on {value!r}")
        return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}[type(node.op)](
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
                unknown = unknown or Unknown(f"depends on `{_text(operand)}`")
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
            if left is None or right is None:
                other = right if left is None else left
                if other is None or isinstance(other, (int, str, tuple, TList, Instance, GroupVal, SpecVal)):
                    same = other is None
                    return same if isinstance(op, ast.Is) else not same
            return Unknown(f"depends on `{_text(node)}`")
        unknown = _first_unknown([left, right])
        if unknown is not None:
            return unknown
        if not (_plain(left) and _plain(right)):
            return Unknown(f"depends on `{_text(node)}`")
        try:
            if isinstance(op, (ast.In, ast.NotIn)):
                found = left in right
                return found if isinstance(op, ast.In) else not found
            return bool(_CMPOPS[type(op)](left, right))
        except (TypeError, KeyError):
            return Unknown(f"comparison at {self._where(frame, node)}")

    def _subscript(self, node: ast.Subscript, frame: Frame) -> Any:
        container = self.eval(node.value, frame)
        index = self.eval(node.slice, frame)
        unknown = _first_unknown([container, index])
        if unknown is not None:
            return unknown
        if isinstance(container, (list, tuple, dict)) and isinstance(index, (int, slice, str)):
            try:
                result = container[index]
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
                        return Unknown(f"depends on `{_text(cond)}`")
                    keep = keep and truth
                if keep:
                    failed = walk(rest)
                    if failed is not None:
                        return failed
            return None

        failed = walk(node.generators)
        if failed is not None:
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
        if isinstance(value, tuple) and _first_unknown(value):
            return None
        if value is None or isinstance(value, (bool, int, str, list, tuple, dict, range)):
            return bool(value)
        return True

    def _where(self, frame: Frame, node: ast.AST) -> str:
        return f"{frame.module.path}:{getattr(node, 'lineno', '?')}"


# -- helpers ------------------------------------------------------------------------
def _capture(entries: list[tuple[Any, ...]]) -> dict[Any, Any]:
    """The final value of everything a branch wrote: key -> ((kind, container, name), value)."""
    out: dict[Any, Any] = {}
    for kind, container, name, _old in entries:
        key = (id(container), name)
        out[key] = ((kind, container, name), _current(kind, container, name))
    return out


def _current(kind: str, container: Any, name: Any) -> Any:
    if kind == "dict":
        return container.get(name, _MISSING)
    return (list(container), container.poison)


def _undo(entries: list[tuple[Any, ...]]) -> None:
    for kind, container, name, old in reversed(entries):
        if kind == "dict":
            if old is _MISSING:
                container.pop(name, None)
            else:
                container[name] = old
        else:
            container[:] = old[0]
            container.poison = old[1]


_TEXTS: dict[int, tuple[ast.AST, str]] = {}


def _text(node: ast.AST) -> str:
    """``ast.unparse`` memoised per node: messages re-render the same conditions per config."""
    cached = _TEXTS.get(id(node))
    if cached is None or cached[0] is not node:
        cached = (node, ast.unparse(node))
        _TEXTS[id(node)] = cached
    return cached[1]


def _unknown_name(sym: Sym, expr: ast.expr | None) -> str:
    """The "unknown name" phrase, adding where the engine object came from when that differs."""
    text = _text(expr) if expr is not None else sym.path
    return f"unknown name `{text}`" + ("" if text == sym.path else f" (= {sym.path})")


def _walk_no_defs(node: ast.AST) -> Iterable[ast.AST]:
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield from _walk_no_defs(child)


def _as_load(target: ast.expr) -> ast.expr:
    """A copy of an assignment target that reads it (for ``x += 1``)."""
    node = copy.deepcopy(target)
    for sub in ast.walk(node):
        if hasattr(sub, "ctx"):
            sub.ctx = ast.Load()
    return node


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _ends_with_max_num_reqs(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "max_num_reqs") or (
        isinstance(node, ast.Attribute) and node.attr == "max_num_reqs"
    )


def _allocation_width(node: ast.Call) -> ast.expr | None:
    """The row-width expression of a ``(max_num_reqs, W)`` allocation, if the call is one."""
    args = node.args
    if args and isinstance(args[0], (ast.Tuple, ast.List)) and len(args[0].elts) == 2:
        first, second = args[0].elts
        if _ends_with_max_num_reqs(first):
            return second
    if len(args) >= 2 and _ends_with_max_num_reqs(args[0]) and not isinstance(args[1], ast.Starred):
        return args[1]
    return None


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, str, float)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return False


def _arith_ok(left: Any, right: Any) -> bool:
    numeric = (int, float)
    if isinstance(left, numeric) and isinstance(right, numeric):
        return True
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return True
    return isinstance(left, (list, tuple)) and isinstance(right, int)


def _op_text(op: ast.operator) -> str:
    return {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}.get(
        type(op), type(op).__name__
    )
