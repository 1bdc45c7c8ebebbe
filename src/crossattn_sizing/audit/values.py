"""The values the restricted evaluator computes with.

Plain Python ints, bools, strings, tuples and ``None`` stand for themselves.
Everything else is one of the classes here: an :class:`Unknown` (something the
evaluator could not or would not compute, carrying the reason the report
prints), a :class:`Sym` (an engine object such as ``self.model_config``, known
only by its path until an attribute of it maps to a config field), the
KV-cache groups and specs of the audited config, instances of classes the
evaluator followed, and references to functions and classes in the source.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from crossattn_sizing.core.config import KVCacheGroup


@dataclass(frozen=True)
class Unknown:
    """A value that could not be evaluated; ``reason`` names what was missing and where."""

    reason: str


@dataclass(frozen=True)
class Sym:
    """An engine object known only by its access path, e.g. ``self.model_config.hf_config``."""

    path: str


@dataclass(frozen=True)
class GroupVal:
    """One ``kv_cache_config.kv_cache_groups`` entry, standing for a harness group."""

    index: int
    group: KVCacheGroup


@dataclass(frozen=True)
class SpecVal:
    """The ``kv_cache_spec`` of a group: exposes its block size and kind."""

    group: KVCacheGroup


@dataclass(frozen=True)
class ExternalName:
    """A name imported from a module outside the tree (torch, numpy) or not found in it."""

    module: str
    name: str


@dataclass(frozen=True)
class FuncRef:
    """A function or method definition in the audited source."""

    module: str
    node: ast.FunctionDef
    owner: ClassRef | None = None

    @property
    def qualname(self) -> str:
        """The name reports use: ``Class.method`` for a method, else the function's name."""
        return f"{self.owner.name}.{self.node.name}" if self.owner else self.node.name


@dataclass(frozen=True)
class ClassRef:
    """A class definition in the audited source."""

    module: str
    node: ast.ClassDef

    @property
    def name(self) -> str:
        """The class's name in the source."""
        return self.node.name


@dataclass(eq=False)
class Instance:
    """An object of a followed class; ``attrs`` holds what its methods assigned to ``self``."""

    cls: ClassRef
    attrs: dict[str, Any] = field(default_factory=dict)
    # The runner's own ``self`` falls back to config names for attributes its
    # ``__init__`` never set (set by a mixin or a later method).
    config_fallback: bool = False


@dataclass(frozen=True)
class BoundMethod:
    """``obj.method`` for an :class:`Instance` (or a group spec) whose class defines ``method``."""

    instance: Any
    func: FuncRef


@dataclass(frozen=True)
class SuperVal:
    """``super()`` inside a method of ``owner``: attribute lookups start at its bases."""

    owner: ClassRef
    instance: Any


class StandInTuple(tuple):
    """A tuple returned by a harness stand-in; ``origin`` names the stand-in for messages."""

    origin: str

    def __new__(cls, items: Any, origin: str) -> StandInTuple:
        """A tuple that remembers which stand-in made it."""
        made = super().__new__(cls, items)
        made.origin = origin
        return made


@dataclass(frozen=True)
class EnumMember:
    """A member of an ``enum.Enum`` class of the tree (``KVCacheSpecKind.MAMBA``), compared by name."""

    enum: str
    name: str


class TList(list):
    """A list the evaluator built; ``poison`` marks one whose contents became unknown."""

    poison: Unknown | None = None


def describe(value: Any) -> str:
    """A short rendering of a value for messages."""
    if isinstance(value, Unknown):
        return f"unknown ({value.reason})"
    if isinstance(value, Sym):
        return value.path
    if isinstance(value, (FuncRef, ClassRef)):
        return getattr(value, "qualname", None) or value.name  # type: ignore[union-attr]
    return repr(value)
