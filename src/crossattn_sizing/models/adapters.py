"""From a model's config to what the harness checks: a RunnerConfig and encoder tokens per request.

The engine sizes its block tables from a handful of config fields; these
adapters read them from transformers' own config classes (WhisperConfig,
BartConfig, MBartConfig, built locally) and from the Nemotron-Parse stand-in
(:mod:`crossattn_sizing.models.nemotron_parse_config`), the way the engine would:

- ``max_model_len`` (``M``) is the smallest of the config's length fields
  (:data:`LENGTH_KEYS`, the engine's list) unless the user passes one, which
  may not exceed it (the engine refuses a longer one at start-up);
- ``max_source_positions`` (``S``) is read as is, ``None`` when the field is
  absent (BART, mBART, Nemotron-Parse): the absence is the bug's trigger;
- encoder tokens per request (``e``) follow the model's encoder: Whisper always
  emits ``max_source_positions`` frames (30 s, padded); BART/mBART a source of
  at most ``max_position_embeddings`` tokens; Nemotron-Parse a count fixed by
  the page size and patch size.

``max_num_batched_tokens`` (``B``) is not in any model config; the engine's
default depends on its release and usage context. The harness picks the
smallest power of two that lets the engine start (``>= M`` since chunked
prefill is off, ``>= e`` since an encoder input is never split) and says so;
pass one to override it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crossattn_sizing.base.errors import ConfigError, HarnessError
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.models._hf import require_transformers
from crossattn_sizing.models.families import FAMILIES, by_model_type
from crossattn_sizing.models.family import Derived, int_field

LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
"""Config fields the engine reads a decoder length from; it takes the smallest present."""

DEFAULT_MAX_MODEL_LEN = 2048
"""The engine's fallback when a config has none of :data:`LENGTH_KEYS`."""

MODEL_NAMES = {f.name: f.model_type for f in FAMILIES.values()}
"""CLI names of the registered model families (:mod:`.families`), and their ``model_type``."""

SCENARIO_REQUESTS = 2
"""Requests in a scenario: two, so a row that spills has a neighbour to spill into."""


def derive_max_model_len(hf_config: Any, requested: int | None = None) -> Derived:
    """``M`` as the engine derives it: the smallest length field, or the user's smaller value."""
    found = {k: v for k in LENGTH_KEYS if (v := int_field(hf_config, k)) is not None}
    if found:
        key = min(found, key=lambda k: found[k])
        derived = Derived(found[key], f"{key}={found[key]}, the smallest length field of the config")
    else:
        why = f"the engine's default {DEFAULT_MAX_MODEL_LEN} (no length field)"
        derived = Derived(DEFAULT_MAX_MODEL_LEN, why)
    if requested is None:
        return derived
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise ConfigError("max_model_len", requested, "must be a positive integer")
    if requested > derived.value:
        raise ConfigError(
            "max_model_len",
            requested,
            f"must be <= {derived.value} ({derived.why}): the engine refuses a longer one at start-up",
        )
    return Derived(requested, f"given; the config allows {derived.value} ({derived.why})")


def source_positions(hf_config: Any) -> int | None:
    """``S``: the config's ``max_source_positions``, ``None`` when the field is absent."""
    return int_field(hf_config, "max_source_positions")


def model_type(hf_config: Any) -> str:
    """The config's ``model_type`` (empty when it has none), which picks the family."""
    return str(getattr(hf_config, "model_type", "") or "")


def encoder_len(
    hf_config: Any,
    *,
    image_size: tuple[int, int] | None = None,
    source_len: int | None = None,
) -> Derived:
    """Encoder tokens of one request of this model (the most it produces for this input).

    ``image_size`` applies to Nemotron-Parse, ``source_len`` to BART-like
    models and to a config with no rule of its own (then it is required);
    passing one that does not apply is an error rather than silently ignored.
    """
    kind = model_type(hf_config)
    family = by_model_type(kind)
    if image_size is not None and (family is None or not family.takes_image_size):
        shown = "x".join(map(str, image_size))
        takers = ", ".join(f.name for f in FAMILIES.values() if f.takes_image_size)
        raise ConfigError("image_size", shown, f"applies to {takers}, not {kind!r}")
    if family is not None:
        return family.encoder_len(hf_config, image_size, source_len)
    if source_len is None:
        known = ", ".join(sorted(MODEL_NAMES))
        raise ConfigError(
            "model_type", kind or None, f"has no encoder-token rule (known: {known}); give the count"
        )
    if isinstance(source_len, bool) or not isinstance(source_len, int) or source_len < 1:
        raise ConfigError("encoder_len", source_len, "must be a positive integer")
    return Derived(source_len, f"given: {source_len} encoder tokens")


def default_batched_tokens(max_model_len: int, encoder_len: int) -> Derived:
    """The harness's ``B``: the smallest power of two with ``B >= M`` and ``B >= e``."""
    need = max(max_model_len, encoder_len)
    b = 1 << (need - 1).bit_length()
    return Derived(b, f"the smallest power of two >= max(M={max_model_len}, e={encoder_len}) "
                      "(the engine starts only with B >= both)")


@dataclass(frozen=True)
class ModelScenario:
    """A model config turned into the harness's terms, each derived number with its reason."""

    name: str
    config: RunnerConfig
    encoder_len: Derived
    max_model_len: Derived
    batched_tokens: Derived


def build_scenario(
    hf_config: Any,
    *,
    max_model_len: int | None = None,
    block_size: int = 16,
    dcp_size: int = 1,
    max_num_batched_tokens: int | None = None,
    max_num_encoder_input_tokens: int | None = None,
    image_size: tuple[int, int] | None = None,
    source_len: int | None = None,
) -> ModelScenario:
    """The RunnerConfig the engine would start with for this model, and one request's encoder tokens.

    Groups: the decoder's self-attention (full) and its cross-attention, both
    at ``block_size``. A ``B`` or ``E`` that cannot serve the request is refused
    here: with ``B < e`` the engine does not start, with ``E < e`` the request
    is never scheduled, so there would be nothing to reproduce.
    """
    encoder_decoder = getattr(hf_config, "is_encoder_decoder", False)
    if encoder_decoder is not True:
        raise ConfigError(
            "is_encoder_decoder",
            encoder_decoder,
            f"model_type {model_type(hf_config)!r} is decoder-only: it has no cross-attention to size",
        )
    m = derive_max_model_len(hf_config, max_model_len)
    e = encoder_len(hf_config, image_size=image_size, source_len=source_len)
    if max_num_batched_tokens is None:
        b = default_batched_tokens(m.value, e.value)
    else:
        b = Derived(max_num_batched_tokens, "given")
        if isinstance(b.value, int) and not isinstance(b.value, bool) and b.value < e.value:
            raise ConfigError(
                "max_num_batched_tokens",
                b.value,
                f"must be >= {e.value}, the request's encoder tokens: the engine never splits an "
                "encoder input and refuses to start",
            )
    if max_num_encoder_input_tokens is not None and max_num_encoder_input_tokens < e.value:
        raise ConfigError(
            "max_num_encoder_input_tokens",
            max_num_encoder_input_tokens,
            f"must be >= {e.value}, the request's encoder tokens: otherwise it is never scheduled",
        )
    config = RunnerConfig(
        max_model_len=m.value,
        max_num_batched_tokens=b.value,
        max_num_encoder_input_tokens=max_num_encoder_input_tokens,
        max_source_positions=source_positions(hf_config),
        dcp_size=dcp_size,
        groups=(KVCacheGroup(GroupKind.FULL, block_size), KVCacheGroup(GroupKind.CROSS, block_size)),
        max_num_reqs=SCENARIO_REQUESTS,
        extra={"model_type": model_type(hf_config)},
    )
    return ModelScenario(model_type(hf_config) or "config", config, e, m, b)


def default_hf_config(name: str) -> Any:
    """A model's default config, built locally from its transformers class (never downloaded)."""
    if name not in MODEL_NAMES:
        raise ConfigError("model", name, f"must be one of {', '.join(sorted(MODEL_NAMES))}")
    return hf_config_from_dict({"model_type": MODEL_NAMES[name]})


def hf_config_from_dict(data: Mapping[str, Any]) -> Any:
    """A transformers config from a config.json's contents, by its ``model_type``.

    A registered family with a class of its own (Nemotron-Parse's local
    stand-in) gets it; any other type transformers knows gets its own class
    (``AutoConfig.for_model``, no hub access).
    """
    if not isinstance(data, Mapping):
        raise ConfigError("config", type(data).__name__, "must be a JSON object")
    kind = data.get("model_type")
    if not isinstance(kind, str) or not kind:
        raise ConfigError("model_type", kind, "a transformers config needs a model_type")
    fields = {k: v for k, v in data.items() if k != "model_type"}
    check_field_types(fields)
    family = by_model_type(kind)
    if family is not None and family.check_fields is not None:
        family.check_fields(fields)
    if family is not None and family.config_class is not None:
        build = family.config_class
    else:
        build = functools.partial(require_transformers().AutoConfig.for_model, kind)
    try:
        return build(**fields)
    except HarnessError:
        raise
    except Exception as exc:  # whatever the config class refuses is the user's file
        reason = f"transformers cannot build this config ({type(exc).__name__}: {exc})"
        raise ConfigError("model_type", kind, reason) from None


POSITIVE_INT_FIELDS = (*LENGTH_KEYS, "patch_size")
"""Config fields the sizing reads as positive integers."""


def check_field_types(fields: Mapping[str, Any]) -> None:
    """The fields the sizing reads must have the type it reads them as.

    A length written as a string (``"max_source_positions": "abc"``) would
    otherwise read as absent, the very condition the bug needs, and the verdict
    would be about a config the user does not have.
    """
    for key in POSITIVE_INT_FIELDS:
        value = fields.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(key, value, "must be a positive integer")
    value = fields.get("max_source_positions")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ConfigError("max_source_positions", value, "must be an integer >= 0 (or left out)")
    if "is_encoder_decoder" in fields and not isinstance(fields["is_encoder_decoder"], bool):
        raise ConfigError("is_encoder_decoder", fields["is_encoder_decoder"], "must be true or false")
