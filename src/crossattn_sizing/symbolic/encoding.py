"""Integer operations as solver terms, with Python's semantics.

Floor division and modulo by a term are nonlinear; each is a fresh quotient
(and remainder) pinned by definitional constraints (``x == q*d + r`` with the
remainder's sign following the divisor's, as Python's ``//`` and ``%``). The
constraints collect in :attr:`Encoding.side` and join every solver query: they
only name values, so they never make a query unsatisfiable, except where the
divisor is 0, which the caller must rule out (Python raises there).
"""

from __future__ import annotations

from typing import Any

from crossattn_sizing.symbolic.terms import z3_module


def is_term(value: Any) -> bool:
    """Whether ``value`` is a z3 integer term (not a Python int)."""
    z3 = z3_module()
    return isinstance(value, z3.ArithRef)


def is_condition(value: Any) -> bool:
    """Whether ``value`` is a z3 boolean term."""
    z3 = z3_module()
    return isinstance(value, z3.BoolRef)


def integer(value: Any) -> bool:
    """An operand the encoding computes with: a Python int (not a bool) or an integer term."""
    return (isinstance(value, int) and not isinstance(value, bool)) or is_term(value)


POSITIVE_NAMES = frozenset({"M", "B", "E", "C", "I", "e"})
POSITIVE_FORMS = ("bs", "kbs", "bpk")
"""The config integers :func:`~crossattn_sizing.symbolic.terms.config_rules` keeps at least 1, by name
(``S`` may be 0); :func:`~crossattn_sizing.symbolic.terms.config_terms` names them so."""


class Encoding:
    """Builds terms for ``//``, ``%``, ceil division, ``max`` and ``min``, collecting side constraints."""

    def __init__(self, prefix: str = "p") -> None:
        self.z3 = z3_module()
        self.prefix = prefix
        self._count = 0
        self.side: list[Any] = []
        self._exact: list[tuple[Any, Any, Any]] = []

    def know_quotient(self, x: Any, d: Any, q: Any) -> None:
        """Record that the rules make ``x == d * q`` exactly (``bs == kbs * bpk``): ``x // d`` is then ``q``.

        The solver could derive it from the remainder's bounds, but only by nonlinear reasoning
        it often does not finish; a release's ``bs // kbs`` is the rule's witness directly.
        """
        self._exact.append((x, d, q))

    def _name(self, what: str) -> Any:
        """A fresh integer, numbered in order: two runs that compute the same way name the same terms
        (which :func:`~crossattn_sizing.symbolic.obligation.same_paths` relies on). Encodings whose
        terms meet in one query take different prefixes."""
        self._count += 1
        return self.z3.Int(f"{self.prefix}{what}!{self._count}")

    def positive(self, value: Any) -> bool:
        """Whether ``value`` is positive by its form: a positive int, a config integer (every one is at
        least 1 by the rules but ``S``), or a sum or product of such. False means "not by its form"."""
        z3 = self.z3
        if isinstance(value, int):
            return value > 0
        if not is_term(value):
            return False
        if z3.is_int_value(value):
            return value.as_long() > 0
        if z3.is_const(value):
            return value.decl().name() in POSITIVE_NAMES or value.decl().name().startswith(POSITIVE_FORMS)
        if z3.is_mul(value) or z3.is_add(value):
            return all(self.positive(child) for child in value.children())
        return False

    def divmod(self, x: Any, d: Any, positive: bool = False) -> tuple[Any, Any]:
        """``(x // d, x % d)`` for ``d != 0``; ``positive`` when the caller knows ``d > 0`` (simpler).

        A constant positive divisor stays linear.
        """
        if isinstance(x, int) and isinstance(d, int):
            return divmod(x, d)
        if isinstance(d, int) and d > 0:  # SMT-LIB div and mod are floor and non-negative for d > 0
            return x / d, x % d
        z3 = self.z3
        for known_x, known_d, known_q in self._exact:
            if (
                is_term(x)
                and is_term(d)
                and z3.eq(z3.simplify(x), known_x)
                and z3.eq(z3.simplify(d), known_d)
            ):
                return known_q, 0
        q, r = self._name("q"), self._name("r")
        if positive:
            self.side += [x == q * d + r, r >= 0, r < d]
            return q, r
        self.side.append(z3.Implies(d != 0, x == q * d + r))
        self.side.append(z3.Implies(d > 0, z3.And(r >= 0, r < d)))
        self.side.append(z3.Implies(d < 0, z3.And(r <= 0, r > d)))
        return q, r

    def floordiv(self, x: Any, d: Any, positive: bool = False) -> Any:
        """``x // d``."""
        return self.divmod(x, d, positive)[0]

    def mod(self, x: Any, d: Any, positive: bool = False) -> Any:
        """``x % d``."""
        return self.divmod(x, d, positive)[1]

    def cdiv(self, x: Any, d: Any, positive: bool = False) -> Any:
        """``-(-x // d)``, the engine's ``cdiv``; for ``d > 0`` the ``q`` with ``d*(q-1) < x <= d*q``."""
        if positive and not (isinstance(x, int) and isinstance(d, int)):
            q = self._name("c")
            self.side += [d * (q - 1) < x, x <= d * q]
            return q
        return -self.floordiv(-x, d)

    def extreme(self, values: list[Any], largest: bool) -> Any:
        """``max(values)`` or ``min(values)`` as nested if-then-else (the first of equals, as Python)."""
        best = values[0]
        for v in values[1:]:
            if isinstance(best, int) and isinstance(v, int):
                best = max(best, v) if largest else min(best, v)
            else:
                best = self.z3.If(v > best if largest else v < best, v, best)
        return best

    def constant(self, value: Any) -> Any:
        """``value`` simplified: a Python int or bool where the term is a constant, else the term."""
        z3 = self.z3
        if not (is_term(value) or is_condition(value)):
            return value
        simple = z3.simplify(value)
        if z3.is_int_value(simple):
            return simple.as_long()
        if z3.is_true(simple):
            return True
        if z3.is_false(simple):
            return False
        return value
