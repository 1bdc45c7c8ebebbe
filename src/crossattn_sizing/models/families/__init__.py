"""The registry of model families: one module each, one line here.

A new family is a module in this package defining ``FAMILY =``
:class:`~crossattn_sizing.models.family.Family` (config adapter, encoder-token
rule, HF module builder, strategy) and its line in :data:`MODULES`. The CLI
(``reproduce NAME``), the adapters and the transformers property find it here.
"""

from __future__ import annotations

import importlib

from crossattn_sizing.models.family import Family

MODULES = (
    "nemotron_parse",
    "whisper",
    "bart",
    "mbart",
)
"""The registered family modules of this package, one line each, in the order the CLI lists them."""

REGISTERED: tuple[Family, ...] = tuple(importlib.import_module(f"{__name__}.{m}").FAMILY for m in MODULES)

FAMILIES: dict[str, Family] = {f.name: f for f in REGISTERED}
"""By CLI name, in registration order."""


def by_model_type(model_type: str) -> Family | None:
    """The family of a config's ``model_type``, or None when no family is registered for it."""
    return next((f for f in REGISTERED if f.model_type == model_type), None)


def with_hf_module() -> tuple[Family, ...]:
    """The families the transformers differential property runs: those with an HF module."""
    return tuple(f for f in REGISTERED if f.attention_class is not None)
