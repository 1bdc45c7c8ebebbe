"""Statements: assignment, loops, ``try``, imports, and the dispatch over statement kinds."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from crossattn_sizing.audit.interp.state import (
    BreakSignal,
    ContinueSignal,
    Frame,
    RaiseSignal,
    ReadError,
    ReturnSignal,
    first_unknown,
)
from crossattn_sizing.audit.interp.syntax import as_load
from crossattn_sizing.audit.modules import _absolute
from crossattn_sizing.audit.values import Instance, StandInTuple, Sym, TList, Unknown


class Statements:
    """Executes statements; relies on the other parts of :class:`Interpreter`."""

    if TYPE_CHECKING:  # the other parts' methods and Interpreter's state, reached through ``self``

        _steps: int

        def __getattr__(self, name: str) -> Any: ...

    # -- statements ------------------------------------------------------------
    def exec_block(self, body: list[ast.stmt], frame: Frame) -> None:
        """Run ``body`` in order, under the evaluation budget."""
        for stmt in body:
            self.exec_stmt(stmt, frame)

    def exec_stmt(self, stmt: ast.stmt, frame: Frame) -> None:
        """Run one statement, counting it against the budget so a runaway loop stops the read."""
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
            load = as_load(stmt.target)
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
            why = Unknown(f"while loop at {self._where(frame, stmt)}")
            self._note_skipped([stmt], frame, why)
            self._poison_targets(stmt.body, frame, why)
        elif isinstance(stmt, ast.Return):
            raise ReturnSignal(None if stmt.value is None else self.eval(stmt.value, frame))
        elif isinstance(stmt, ast.Raise):
            raise RaiseSignal(self._where(frame, stmt))
        elif isinstance(stmt, ast.Break):
            raise BreakSignal()
        elif isinstance(stmt, ast.Continue):
            raise ContinueSignal()
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

    def _exec_for(self, stmt: ast.For, frame: Frame) -> None:
        iterable = self.eval(stmt.iter, frame)
        items = self._iterate(iterable)
        if isinstance(items, Unknown):
            self._note_skipped([stmt], frame, items)
            self._poison_targets([stmt], frame, items)
            return
        outer, frame.loop_taint = frame.loop_taint, None
        broke = False
        for item in items:
            self._assign(stmt.target, item, frame)
            try:
                self.exec_block(stmt.body, frame)
            except BreakSignal:
                broke = True
                break
            except ContinueSignal:
                continue
        if not broke:
            self.exec_block(stmt.orelse, frame)
        taint, frame.loop_taint = frame.loop_taint, outer
        if taint is not None:
            self._poison_targets(stmt.body, frame, taint)

    def _exec_try(self, stmt: ast.Try, frame: Frame) -> None:
        try:
            self.exec_block(stmt.body, frame)
        except RaiseSignal as exc:
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
                value: Any = self.index._resolve_import(source, alias.name, 0)
                value = self._function_value(alias.name, value) or value
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
            elif isinstance(value, (tuple, list)) and not first_unknown([value]):
                if len(value) != len(target.elts):
                    values = [self._unpack_mismatch(value, target, frame)] * len(target.elts)
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

    def _unpack_mismatch(self, value: tuple[Any, ...] | list[Any], target: ast.Tuple | ast.List,
                         frame: Frame) -> Unknown:  # fmt: skip
        """Why ``a, b, ... = value`` fails, at its line, naming a harness stand-in that produced ``value``."""
        why = f"unpacking {len(value)} values into {len(target.elts)} targets at {self._where(frame, target)}"
        if isinstance(value, StandInTuple):
            why += f" (the {len(value)} values come from {value.origin})"
        return Unknown(why)
