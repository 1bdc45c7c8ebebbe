"""Every engine family the harness runs: one line each. Commands find an engine here, by the spec's name.

``--engine NAME==X`` (a release from the package registry) and ``--engine
NAME@PATH`` (a tree) name an engine family by ``NAME``; :func:`family_of`
gives its :class:`~crossattn_sizing.engine.interface.EngineFamily`. A family's
sub-package is imported only when a spec names it (importing SGLang's adapter
never imports vLLM's, and neither runs for a built-in policy), so the lines
below are module paths, not imports. Adding an engine is its sub-package and
one line here.
"""

from __future__ import annotations

import importlib
from typing import cast

from crossattn_sizing.base.errors import OptionError
from crossattn_sizing.engine.interface import EngineFamily

ENGINES: dict[str, str] = {
    "vllm": "crossattn_sizing.engine.vllm.family",
    "sglang": "crossattn_sizing.engine.sglang.family",
}
"""Engine name -> the module whose ``FAMILY`` implements the protocol."""


def engine_name(spec: str) -> str:
    """The ``NAME`` of ``NAME==X``, ``NAME@PATH`` or a bare ``NAME``."""
    text = spec.strip()
    cut = min((i for i in (text.find("=="), text.find("@")) if i >= 0), default=len(text))
    return text[:cut].strip()


def family(name: str) -> EngineFamily:
    """The family registered as ``name`` (its sub-package imported now)."""
    return cast("EngineFamily", importlib.import_module(ENGINES[name]).FAMILY)


def family_of(spec: str, option: str = "--engine") -> EngineFamily:
    """The family ``spec`` names; an unknown name is ``option``'s error, naming every engine."""
    name = engine_name(spec)
    if name not in ENGINES:
        known = ", ".join(f"{n}==X, {n}@PATH" for n in ENGINES)
        raise OptionError(option, spec.strip(), f"names no engine the harness runs (engines: {known})")
    return family(name)
