"""Which engine's report facts a spec names: the one registry of :class:`ReportFacts`.

Apart from :mod:`crossattn_sizing.engine.report_facts` (which the engines' fact modules import), so no
module imports one that imports it back. A new engine adds its module's ``FACTS`` here.
"""

from __future__ import annotations

from crossattn_sizing.base.errors import OptionError
from crossattn_sizing.engine import sglang_report_facts, vllm_report_facts
from crossattn_sizing.engine.report_facts import ReportFacts

REGISTRY: dict[str, ReportFacts] = {f.engine: f for f in (vllm_report_facts.FACTS, sglang_report_facts.FACTS)}
"""Engine name (the spec's prefix) -> its facts."""


def facts_for(spec: str) -> ReportFacts:
    """The facts of the engine a spec names; one line naming the accepted spellings otherwise."""
    name = spec.strip().split("==")[0].split("@")[0]
    if name not in REGISTRY:
        raise OptionError("--engine", spec, "report takes vllm==X, vllm@PATH, sglang==X or sglang@PATH")
    return REGISTRY[name]
