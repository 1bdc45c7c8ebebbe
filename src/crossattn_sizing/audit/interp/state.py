"""The evaluator's runtime state: frames, control-flow signals, allocations and value tests.

Shared by every part of the evaluator; holds no evaluation logic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from crossattn_sizing.audit.known import KnownFn
from crossattn_sizing.audit.modules import Module
from crossattn_sizing.audit.values import ClassRef, EnumMember, FuncRef, Sym, TList, Unknown

TABLE_MARKER = "BlockTable"


MAX_DEPTH = 12


# A helper whose result is used is entered when it has at most this many statements
# (nested ones included; docstrings and comments do not count, so a chain of
# ``if isinstance(...): return KIND`` like ``get_kv_cache_spec_kind`` qualifies).
SHORT_FUNCTION_STATEMENTS = 40


MISSING = object()


class ReadError(Exception):
    """The sizing could not be read; the message names what was not found or not known."""


@dataclass(frozen=True)
class KnownFnVal:
    """A known function as a value (so ``f = cdiv; f(a, b)`` works too)."""

    name: str
    fn: KnownFn


@dataclass(frozen=True)
class StandInVal:
    """A stand-in (:mod:`~crossattn_sizing.audit.standins`) as a value, with the release's definition."""

    name: str
    definition: FuncRef | None


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


class ReturnSignal(Exception):
    """A ``return`` unwinding the evaluated function, carrying its value."""
    def __init__(self, value: Any) -> None:
        self.value = value


class RaiseSignal(Exception):
    """A ``raise`` in the evaluated code, carrying where it was."""
    def __init__(self, where: str) -> None:
        self.where = where


class BreakSignal(Exception):
    """A ``break`` unwinding to its loop."""


class ContinueSignal(Exception):
    """A ``continue`` unwinding to its loop."""


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
    """Whether ``cls`` is a block-table class (its name has the marker): where allocations count."""
    return cls is not None and TABLE_MARKER in cls.name


def same(a: Any, b: Any) -> bool:
    """Whether two values are the same on both paths of a branch (an unknown never is)."""
    if a is b:
        return True
    if isinstance(a, Unknown) or isinstance(b, Unknown) or type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=False))
    try:
        return bool(a == b)
    except Exception:  # comparing opaque values: treat as different
        return False


def first_unknown(values: Iterable[Any]) -> Unknown | None:
    """The first unknown among ``values`` (a poisoned list counts as its poison), or None."""
    for v in values:
        if isinstance(v, Unknown):
            return v
        if isinstance(v, TList) and v.poison is not None:
            return v.poison
    return None


def plain(value: Any) -> bool:
    """Whether ``value`` is plain data (None, numbers, strings, enum members, sequences of them)."""
    if value is None or isinstance(value, (bool, int, str, float, EnumMember)):
        return True
    if isinstance(value, (list, tuple)):
        return all(plain(v) for v in value)
    return False


def arith_ok(left: Any, right: Any) -> bool:
    """Whether arithmetic on these operands is one the evaluator computes (numbers, sequences)."""
    numeric = (int, float)
    if isinstance(left, numeric) and isinstance(right, numeric):
        return True
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return True
    return isinstance(left, (list, tuple)) and isinstance(right, int)


def undecided_because(test: Any) -> str:
    """Why a condition's value is undecided, as a suffix for the "depends on" reason."""
    if isinstance(test, Unknown):
        return f", which is unknown: {test.reason}"
    if isinstance(test, TList) and test.poison is not None:
        return f", which is unknown: {test.poison.reason}"
    if isinstance(test, Sym):
        return f", an engine object (`{test.path}`) the config does not determine"
    return ""
