"""Which engine's report facts a spec names: ``engine/<family>/report_facts.py``'s ``FACTS``.

Found by the engine registry's family (:data:`crossattn_sizing.engine.registry.ENGINES`), imported only
when a spec names it, so a new engine adds its facts as one module in its sub-package and nothing here.
"""

from __future__ import annotations

import importlib
from typing import cast

from crossattn_sizing.base.errors import OptionError
from crossattn_sizing.engine.registry import ENGINES, engine_name
from crossattn_sizing.engine.report_facts import ReportFacts

ACCEPTED = "report takes vllm==X, vllm@PATH, sglang==X, sglang@PATH or tensorrt_llm@PATH"
"""The one line refusing a spec whose engine has no report facts."""


def facts_for(spec: str) -> ReportFacts:
    """The facts of the engine a spec names (its family's ``report_facts`` module, imported now); one line
    naming the accepted spellings for an engine with none."""
    name = engine_name(spec)
    module = f"{ENGINES[name].rsplit('.', 1)[0]}.report_facts" if name in ENGINES else ""
    try:
        return cast("ReportFacts", importlib.import_module(module).FACTS) if module else _refuse(spec)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return _refuse(spec)


def _refuse(spec: str) -> ReportFacts:
    raise OptionError("--engine", spec, ACCEPTED)
