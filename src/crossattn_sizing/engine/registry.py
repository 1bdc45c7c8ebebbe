"""Every engine family the harness runs: the built-in lines, and any an installed package declares.

``--engine NAME==X`` (a release from the package registry) and ``--engine
NAME@PATH`` (a tree) name an engine family by ``NAME``; :func:`family_of`
gives its :class:`~crossattn_sizing.engine.interface.EngineFamily`. Families
come from two places:

- :data:`ENGINES`, the families shipped in ``engine/<family>/`` (one line each);
- the entry-point group :data:`GROUP` (``crossattn_sizing.engines``): an installed package declares
  ``NAME = "its.module:FAMILY"`` (or a module holding ``FAMILY``) and ``--engine NAME...`` runs it,
  with no edit to the harness. A built-in name is never replaced by an entry point.

A family is imported only when a spec names it (importing SGLang's adapter never
imports vLLM's, and neither runs for a built-in policy), so the lines below are
module paths, not imports, and listing the names loads no plug-in. A plug-in
that cannot be loaded, or that does not answer the protocol, is one line
naming its entry point and what went wrong (:class:`EngineUnavailable`), and
only when a spec names it.
"""

from __future__ import annotations

import importlib
from functools import cache
from importlib import metadata
from typing import Any, cast

from crossattn_sizing.base.errors import OptionError, ReleaseUnavailable, described
from crossattn_sizing.engine.interface import EngineFamily, EngineMode, OtherModes

ENGINES: dict[str, str] = {
    "vllm": "crossattn_sizing.engine.vllm.family",
    "sglang": "crossattn_sizing.engine.sglang.family",
    "tensorrt_llm": "crossattn_sizing.engine.tensorrt_llm.family",
}
"""Built-in engine name -> the module whose ``FAMILY`` implements the protocol."""

GROUP = "crossattn_sizing.engines"
"""The entry-point group an installed package adds an engine family through."""

CONTRACT = ("name", "mode", "ranges", "check_spec", "refused", "obtain", "tree", "report_facts", "command",
            "unsupported")
"""What every family must have, whatever its mode (the rest of :class:`EngineFamily` is per mode)."""

PER_MODE = {
    EngineMode.SUBJECT: ("subject_spec", "policy", "impl", "subject_lines"),
    EngineMode.PROPERTIES: ("verify_suite", "property_fixture"),
    EngineMode.SIZER: ("verify_suite", "sizer"),
}
"""What a family of each mode must answer besides :data:`CONTRACT`."""


class EngineUnavailable(ReleaseUnavailable):
    """An engine family named by a spec could not be loaded, or does not answer the protocol."""


def engine_name(spec: str) -> str:
    """The ``NAME`` of ``NAME==X``, ``NAME@PATH`` or a bare ``NAME``."""
    text = spec.strip()
    cut = min((i for i in (text.find("=="), text.find("@")) if i >= 0), default=len(text))
    return text[:cut].strip()


def plugged_in() -> dict[str, metadata.EntryPoint]:
    """The installed packages' engine families by name (entry points, not loaded), built-in names aside."""
    found: dict[str, metadata.EntryPoint] = {}
    for point in metadata.entry_points(group=GROUP):
        if point.name not in ENGINES:
            found.setdefault(point.name, point)
    return found


def names() -> list[str]:
    """Every engine name a spec may start with: the built-in families, then the installed ones."""
    return [*ENGINES, *sorted(plugged_in())]


def is_engine(spec: str) -> bool:
    """Whether ``spec``'s ``NAME`` is an engine family's (built-in or installed)."""
    name = engine_name(spec)
    return bool(name) and (name in ENGINES or name in plugged_in())


def family(name: str) -> EngineFamily:
    """The family registered as ``name`` (its module imported now); KeyError for a name none has."""
    if name in ENGINES:
        return cast("EngineFamily", importlib.import_module(ENGINES[name]).FAMILY)
    return _plugged_family(name)


@cache
def _plugged_family(name: str) -> EngineFamily:
    point = plugged_in()[name]
    where = f"engine {name} (entry point {GROUP}: {point.value}"
    where += f" of {point.dist.name})" if point.dist is not None else ")"
    try:
        loaded: Any = point.load()
    except Exception as exc:  # a plug-in is code the harness does not own: whatever it raises is one line
        raise EngineUnavailable(f"{where} cannot be loaded: {described(exc)}") from None
    found = getattr(loaded, "FAMILY", loaded) if not hasattr(loaded, "mode") else loaded
    problem = contract_problem(found, name)
    if problem:
        raise EngineUnavailable(f"{where} is not an engine family: {problem}")
    return cast("EngineFamily", found)


def contract_problem(found: object, name: str) -> str:
    """What ``found`` lacks of the protocol as family ``name`` ("" when nothing)."""
    missing = [m for m in CONTRACT if not hasattr(found, m)]
    if missing:
        return f"it has no {', '.join(missing)} (crossattn_sizing.engine.interface.EngineFamily)"
    mode = getattr(found, "mode", None)
    if not isinstance(mode, EngineMode):
        return f"its mode {mode!r} is not an EngineMode ({', '.join(m.name for m in EngineMode)})"
    if getattr(found, "name", None) != name:
        return f"its name {getattr(found, 'name', None)!r} is not the entry point's {name!r}"
    lacking = [m for m in PER_MODE[mode]  # missing, or left to OtherModes (which raises WrongMode)
               if getattr(type(found), m, None) in (None, getattr(OtherModes, m))]  # fmt: skip
    return f"a {mode.value} family needs {', '.join(lacking)}" if lacking else ""


def family_of(spec: str, option: str = "--engine") -> EngineFamily:
    """The family ``spec`` names; an unknown name is ``option``'s error, naming every engine."""
    name = engine_name(spec)
    if not is_engine(name):
        known = ", ".join(f"{n}==X, {n}@PATH" for n in names())
        raise OptionError(option, spec.strip(), f"names no engine the harness runs (engines: {known})")
    try:
        return family(name)
    except EngineUnavailable as exc:
        raise EngineUnavailable(f"{option} {spec.strip()}: {exc}") from None
