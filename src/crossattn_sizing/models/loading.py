"""Reading the ``--config`` of ``reproduce``: a transformers config.json or a harness RunnerConfig.

The two are told apart by their keys: a RunnerConfig has ``groups``, a
transformers config has ``model_type``. A harness config already says what the
engine starts with, so its scenario is taken as given; the request's encoder
tokens default to the admitted bound, the longest request the scheduler lets
through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossattn_sizing.base.errors import ConfigError
from crossattn_sizing.base.jsoninput import read_json_option
from crossattn_sizing.core import admission
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.models.adapters import Derived, ModelScenario


def read_json(text: str) -> Mapping[str, Any]:
    """JSON text, or the path of a file holding it, as an object."""
    return read_json_option("--config", text)


def is_runner_config(data: Mapping[str, Any]) -> bool:
    """A harness RunnerConfig (``groups``), as opposed to a transformers config (``model_type``)."""
    if "groups" in data:
        return True
    if "model_type" in data:
        return False
    reason = "is neither a transformers config (model_type) nor a RunnerConfig (groups)"
    raise ConfigError("--config", sorted(data)[:6], reason)


def runner_scenario(
    data: Mapping[str, Any],
    *,
    max_model_len: int | None = None,
    dcp_size: int | None = None,
    encoder_len: int | None = None,
) -> ModelScenario:
    """The scenario of a harness config: as written, with ``M`` and ``C`` overridable."""
    config = RunnerConfig.from_dict(data)
    m_why = "from the config"
    if max_model_len is not None:
        config = config.replace(max_model_len=max_model_len)
        m_why = "given"
    if dcp_size is not None:
        config = config.replace(dcp_size=dcp_size)
    if not config.cross_groups():
        raise ConfigError("groups", [g.kind.value for g in config.groups], "has no cross-attention group")
    bound = admission.encoder_bound(config)
    if encoder_len is None:
        e = Derived(bound, "the admitted bound min(E, B), the longest request the scheduler lets through")
    elif not admission.admits(config, encoder_len):
        reason = f"is not admitted (1 <= e <= min(E, B) = {bound})"
        raise ConfigError("--encoder-len", encoder_len, reason)
    else:
        e = Derived(encoder_len, "given")
    return ModelScenario(
        "config",
        config,
        e,
        Derived(config.max_model_len, m_why),
        Derived(config.max_num_batched_tokens, "from the config"),
    )
