"""A release's own sizing code evaluated with solver terms: the audit evaluator, split per path.

:class:`SymbolicInterpreter` is the audit's :class:`~crossattn_sizing.audit.interp.Interpreter`
given a :class:`~crossattn_sizing.symbolic.terms.ConfigTerms` for its config:
every config integer the code reads (through the audit's own name table,
:mod:`crossattn_sizing.audit.known`) is a term, and arithmetic, comparisons and
the known integer functions (``max``, ``min``, ``cdiv``, ``round_up``, ...)
on terms build terms. A condition that depends on a term is decided by the
path's :class:`~crossattn_sizing.symbolic.paths.PathOracle`, so each run
follows one path and carries its conditions. Everything else the evaluator
does is unchanged: what it cannot read stays an ``Unknown`` with its line, and
a width that is one makes the proof "not run", naming it.
"""

from __future__ import annotations

import ast
from typing import Any, cast

from crossattn_sizing.audit.extract import RunnerSpec, locate
from crossattn_sizing.audit.interp import Interpreter, RaiseSignal, ReadError
from crossattn_sizing.audit.interp.state import Frame, KnownFnVal, first_unknown
from crossattn_sizing.audit.interp.syntax import CMPOPS, op_text, source_text
from crossattn_sizing.audit.known import ARITHMETIC
from crossattn_sizing.audit.modules import ModuleIndex
from crossattn_sizing.audit.values import Instance, Sym, TList, Unknown
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.symbolic.encoding import Encoding, integer, is_condition, is_term
from crossattn_sizing.symbolic.obligation import PathWidths
from crossattn_sizing.symbolic.paths import PathOracle, TooManyPaths, explore
from crossattn_sizing.symbolic.run import NotProvable, PathsOf
from crossattn_sizing.symbolic.terms import ConfigTerms, config_rules, exact_quotients

_LINEAR = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}


class SymbolicInterpreter(Interpreter):
    """The audit evaluator over terms; conditions on terms are decided by ``oracle`` (one path per run)."""

    def __init__(self, index: ModuleIndex, config: ConfigTerms, oracle: PathOracle) -> None:
        super().__init__(index, cast("RunnerConfig", config))
        self.oracle = oracle
        self.enc: Encoding = oracle.enc
        self._text = "a condition on the config"

    # -- where a term meets the evaluator ------------------------------------------------
    def _binop(self, op: ast.operator, left: Any, right: Any, frame: Frame, node: ast.AST) -> Any:
        if not (is_term(left) or is_term(right)):
            return super()._binop(op, left, right, frame, node)
        where = self._where(frame, node)
        if not (integer(left) and integer(right)):
            return (
                left
                if isinstance(left, Unknown)
                else right
                if isinstance(right, Unknown)
                else Unknown(
                    f"`{op_text(op)}` on a config term and {type(right if is_term(left) else left).__name__} "
                    f"at {where}"
                )
            )
        if type(op) in _LINEAR:
            return self.enc.constant(_LINEAR[type(op)](left, right))
        if isinstance(op, (ast.FloorDiv, ast.Mod)):
            return self._division(left, right, isinstance(op, ast.Mod), where)
        return Unknown(f"`{op_text(op)}` on a config term at {where} is not encoded for the solver")

    def _division(self, x: Any, d: Any, modulo: bool, where: str, ceil: bool = False) -> Any:
        """``x // d``, ``x % d`` or ``cdiv(x, d)``; a divisor that may be 0 on this path is unknown
        (Python raises there). A divisor the path keeps positive gets the simpler encoding."""
        positive = self.enc.positive(d)
        if not positive and self.oracle.possible(d == 0):
            return Unknown(f"the divisor at {where} can be 0 on this path")
        positive = positive or not self.oracle.possible(d < 0)
        if ceil:
            return self.enc.constant(self.enc.cdiv(x, d, positive))
        q, r = self.enc.divmod(x, d, positive)
        return self.enc.constant(r if modulo else q)

    def _compare_one(self, op: ast.cmpop, left: Any, right: Any, frame: Frame, node: ast.AST) -> Any:
        if not (is_term(left) or is_term(right)):
            return super()._compare_one(op, left, right, frame, node)
        if isinstance(op, (ast.Is, ast.IsNot)) and (left is None or right is None):
            return isinstance(op, ast.IsNot)  # a term is never None
        if type(op) in CMPOPS and integer(left) and integer(right):
            self._text = source_text(node)
            return self.enc.constant(CMPOPS[type(op)](left, right))
        return Unknown(f"comparison `{source_text(node)}` of a config term at {self._where(frame, node)}")

    def _truth(self, value: Any) -> bool | None:
        if is_term(value):
            value = value != 0
        if is_condition(value):
            return self.oracle.decide(value, self._text)
        return super()._truth(value)

    def _unary(self, node: ast.UnaryOp, frame: Frame) -> Any:
        if isinstance(node.op, (ast.USub, ast.UAdd)):
            value = self.eval(node.operand, frame)
            if is_term(value):
                return -value if isinstance(node.op, ast.USub) else value
        return super()._unary(node, frame)

    def _known(self, func: KnownFnVal, args: list[Any], kwargs: dict[str, Any], frame: Frame,
               node: ast.Call) -> Any:  # fmt: skip
        name, where = func.name.rpartition(".")[2], self._where(frame, node)
        flat = [*args, *kwargs.values()]
        flat += [v for a in args if isinstance(a, (list, tuple)) for v in a]
        if name not in ARITHMETIC - {"len"} or not any(is_term(v) for v in flat):
            return super()._known(func, args, kwargs, frame, node)
        items = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args)
        unknown = first_unknown(flat)
        if unknown is not None:  # the first thing not read, where it was not read
            return unknown
        if kwargs or not all(integer(v) for v in items):
            return Unknown(f"{name}(...) of a config term with other operands at {where}")
        if name in ("max", "min") and items:
            return self.enc.constant(self.enc.extreme(items, largest=name == "max"))
        if name == "int" and len(items) == 1:
            return items[0]
        if name in ("cdiv", "round_up", "round_down") and len(items) == 2:
            x, y = items
            if name == "cdiv":
                return self._division(x, y, False, where, ceil=True)
            if name == "round_up":
                return self._times(self._division(x + y - 1, y, False, where), y)
            return self._times(self._division(x, y, False, where), y)
        return Unknown(f"{name}(...) of a config term at {where} is not encoded for the solver")

    @staticmethod
    def _times(value: Any, y: Any) -> Any:
        return value if isinstance(value, Unknown) else value * y


def run_path(index: ModuleIndex, cls: Any, method: Any, cfg: ConfigTerms, oracle: PathOracle) -> PathWidths:
    """One path of the runner's sizing over ``cfg``: its conditions and a width term per group."""
    interp = SymbolicInterpreter(index, cfg, oracle)
    runner = Instance(cls, config_fallback=True)
    init = index.find_method(cls, "__init__")
    try:
        if init is not None:
            params = [a.arg for a in init.node.args.posonlyargs + init.node.args.args][1:]
            interp.run_init(runner, [Sym(p) for p in params], {})
        interp.call(method, [Sym("kv_cache_config")], {}, runner)
    except RaiseSignal as exc:
        raise NotProvable(f"the source raises at {exc.where} on the path {_taken(oracle)}") from None
    except ReadError as exc:
        raise NotProvable(str(exc)) from None
    allocations = interp.allocations
    if not allocations:
        why = f": {'; '.join(dict.fromkeys(interp.skipped))}" if interp.skipped else ""
        raise NotProvable(f"no block-table allocation reached on the path {_taken(oracle)}{why}")
    if len(allocations) != len(cfg.groups):
        sites = ", ".join(sorted({a.where for a in allocations}))
        raise NotProvable(
            f"{len(allocations)} block-table allocations for {len(cfg.groups)} groups ({sites})"
        )
    for alloc in allocations:
        if isinstance(alloc.width, Unknown):
            raise NotProvable(f"row width at {alloc.where} could not be read: {alloc.width.reason}")
        if not integer(alloc.width):
            raise NotProvable(f"row width at {alloc.where} is {type(alloc.width).__name__}, not an integer")
    return PathWidths(tuple(oracle.conditions), tuple(a.width for a in allocations), tuple(oracle.taken),
                      tuple(oracle.enc.side))  # fmt: skip


def _taken(oracle: PathOracle) -> str:
    return "(" + "; ".join(oracle.taken) + ")" if oracle.taken else "(no condition on the config)"


def runner_paths(index: ModuleIndex, spec: RunnerSpec) -> PathsOf:
    """The runner's sizing as :data:`~crossattn_sizing.symbolic.run.PathsOf`: every feasible path per shape.

    Raises :class:`ReadError` when the runner cannot be located (as the audit's read does).
    """
    cls, method = locate(index, spec)

    def paths_of(enc: Encoding, cfg: ConfigTerms) -> list[PathWidths]:
        try:
            return explore(
                config_rules(cfg),
                lambda oracle: run_path(index, cls, method, cfg, oracle),
                exact_quotients(cfg),
            )
        except TooManyPaths as exc:
            raise NotProvable(str(exc)) from None

    return paths_of


__all__ = ["SymbolicInterpreter", "TList", "runner_paths"]
