"""The evaluator: one :class:`Interpreter` per audited config, assembled from its parts."""

from __future__ import annotations

import ast
from typing import Any

from crossattn_sizing.audit.interp.attributes import Attributes
from crossattn_sizing.audit.interp.branches import Branches
from crossattn_sizing.audit.interp.calls import Calls
from crossattn_sizing.audit.interp.expressions import Expressions
from crossattn_sizing.audit.interp.state import (
    Allocation,
    BreakSignal,
    ContinueSignal,
    Frame,
    RaiseSignal,
    ReturnSignal,
    same,
)
from crossattn_sizing.audit.interp.statements import Statements
from crossattn_sizing.audit.modules import ModuleIndex
from crossattn_sizing.audit.values import FuncRef, Instance, Unknown
from crossattn_sizing.core.config import RunnerConfig


class Interpreter(Statements, Branches, Expressions, Attributes, Calls):
    """The restricted evaluator, assembled from its parts; see :mod:`crossattn_sizing.audit.interp`."""
    def __init__(self, index: ModuleIndex, config: RunnerConfig, *, budget: int = 400_000) -> None:
        self.index = index
        self.config = config
        self.follow = True
        self.allocations: list[Allocation] = []
        # Why code that builds a block table was not evaluated (reported when no table is reached).
        self.skipped: list[str] = []
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
        except ReturnSignal as ret:
            result = ret.value
        finally:
            self._depth -= 1
        for other in frame.pending_returns:
            if not same(result, other):
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
                except (RaiseSignal, BreakSignal, ContinueSignal):
                    self._poison_targets([stmt], frame, Unknown(f"raised at {self._where(frame, stmt)}"))
                except ReturnSignal:
                    break
        finally:
            self.follow = saved

    def _where(self, frame: Frame, node: ast.AST) -> str:
        return f"{frame.module.path}:{getattr(node, 'lineno', '?')}"

