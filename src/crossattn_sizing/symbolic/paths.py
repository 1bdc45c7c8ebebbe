"""Splitting a run at every condition that depends on a config term, one path at a time.

The evaluator asks :meth:`PathOracle.decide` for the truth of a solver
condition. A condition only one side of which is feasible (under the config
rules and the path so far) takes that side; one both sides of which are
feasible takes the side :attr:`PathOracle.forced` says, or ``True`` the first
time, and is recorded as a branch point. :func:`explore` re-runs the evaluation
from the start with each branch point's other side forced, depth first, so
every feasible path runs once and no evaluator state needs copying.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from crossattn_sizing.symbolic.encoding import Encoding

MAX_PATHS = 64
"""Paths explored per shape before the proof gives up ("not run", naming the bound)."""

T = TypeVar("T")


class TooManyPaths(Exception):
    """More than :data:`MAX_PATHS` feasible paths."""


@dataclass
class PathOracle:
    """Decides term-dependent conditions for one run; ``forced`` fixes the first branch points' sides."""

    enc: Encoding
    rules: list[Any]
    forced: list[bool]
    conditions: list[Any] = field(default_factory=list)
    taken: list[str] = field(default_factory=list)
    branches: list[tuple[bool, bool]] = field(default_factory=list)  # (side taken, both feasible)
    _solver: Any = None
    _added: int = 0  # how many of the encoding's definitions the solver holds

    def possible(self, condition: Any) -> bool:
        """Whether ``condition`` can hold on this path (an undecided query counts as possible).

        One incremental solver per run holds the rules, the definitions and the conditions so far.
        """
        z3 = self.enc.z3
        if self._solver is None:
            self._solver = z3.Solver()
            self._solver.set("timeout", 5_000)
            self._solver.add(*self.rules)
        side = self.enc.side
        self._solver.add(*side[self._added :])
        self._added = len(side)
        self._solver.push()
        self._solver.add(condition)
        verdict = self._solver.check()
        self._solver.pop()
        return bool(verdict != z3.unsat)

    def decide(self, condition: Any, text: str) -> bool:
        """The side of ``condition`` this path takes (recorded with ``text`` for reports)."""
        z3 = self.enc.z3
        can_true, can_false = self.possible(condition), self.possible(z3.Not(condition))
        both = can_true and can_false
        if both:
            k = len(self.branches)
            side = self.forced[k] if k < len(self.forced) else True
            self.branches.append((side, True))
        else:
            side = can_true
        taken = condition if side else z3.Not(condition)
        self.conditions.append(taken)
        if self._solver is not None:
            self._solver.add(taken)
        self.taken.append(f"`{text}` is {side}")
        return side


def explore(rules: list[Any], run: Callable[[PathOracle], T],
            exact: Sequence[tuple[Any, Any, Any]] = ()) -> list[T]:  # fmt: skip
    """Every feasible path's result: ``run`` is called once per path with its own oracle and encoding.

    ``exact`` are the quotients the rules fix (:func:`~crossattn_sizing.symbolic.terms.exact_quotients`).
    """
    results: list[T] = []
    todo: list[list[bool]] = [[]]
    while todo:
        forced = todo.pop()
        if len(results) >= MAX_PATHS:
            raise TooManyPaths(f"more than {MAX_PATHS} feasible paths")
        enc = Encoding()
        for x, d, q in exact:
            enc.know_quotient(x, d, q)
        oracle = PathOracle(enc, rules, forced)
        results.append(run(oracle))
        sides = [side for side, _ in oracle.branches]
        for k in range(len(forced), len(oracle.branches)):
            if sides[k]:  # the other side of each new branch point, deepest last
                todo.append([*sides[:k], False])
    return results
