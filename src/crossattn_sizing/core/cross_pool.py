"""Encoder-decoder models on an engine whose cross-attention K/V have a pool of their own (pure Python).

TensorRT-LLM's PyTorch flow sizes one cross pool per engine, once, from the
model's Hugging Face config and two engine settings (``max_seq_len``,
``max_input_len``); :class:`~crossattn_sizing.core.layouts.CrossPool` is that
layout. What a request puts in it is its encoder's output, and how long that is
depends on the model family, not on the engine:

- an audio encoder (Whisper) emits exactly ``max_source_positions`` frames for
  every input (30 s of audio -> 1500), whatever ``max_input_len`` says: the
  prompt the engine measures is the decoder's text;
- a text encoder (T5, BART, mBART) holds the prompt, which the engine admits up
  to ``max_input_len`` (or ``max_seq_len`` when that is unset), and never more
  than the encoder's declared position limit.

A :class:`CrossPoolCase` is one such request on one engine configuration; the
capacity property asks whether its encoder tokens fit the pool the engine's own
sizing gives (:func:`overflows`). Nothing here runs an engine: the pool length
is the caller's (an engine adapter's answer).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from crossattn_sizing.base.errors import ConfigError, bounded, described
from crossattn_sizing.core.layouts import CrossPool, RowUse, write_overflows

LIMIT_KEYS = (
    "max_encoder_input_len",
    "encoder_max_input_length",
    "max_encoder_position_embeddings",
    "encoder_max_position_embeddings",
    "max_position_embeddings",
    "n_positions",
)
"""The six config names TensorRT-LLM's cross-pool sizing reads as an encoder limit, in its order."""

SOURCE_POSITIONS = "max_source_positions"
"""The encoder limit Whisper (and fairseq-style configs) declare; not in :data:`LIMIT_KEYS` before the fix."""

DECLARABLE = (*LIMIT_KEYS, SOURCE_POSITIONS)
"""Every encoder-limit name a drawn config may carry."""

DECODER_SIDE = ("max_position_embeddings", "n_positions")
"""Names that, in a Whisper config, would describe the decoder (448 positions), not the encoder."""

DEFAULT_TOKENS_PER_BLOCK = 32
"""TensorRT-LLM's ``KvCacheConfig.tokens_per_block`` default."""


@dataclass(frozen=True)
class EncDecFamily:
    """An encoder-decoder model as its Hugging Face config describes it, and what its encoder emits.

    ``geometry`` holds the config's layer, head and width keys (what the
    engine's sizing reads besides the limits); ``native`` the limit keys the
    published config carries; ``encoder_positions`` the encoder's limit (the
    value any declared encoder-limit key has); ``audio``: the encoder emits
    exactly ``encoder_positions`` tokens for every request.
    """

    name: str
    geometry: Mapping[str, int]
    encoder_positions: int
    native: tuple[str, ...]
    audio: bool = False
    decoder_positions: int | None = None

    def limit_value(self, key: str) -> int:
        """The value a config of this family gives ``key`` when it declares it."""
        if self.audio and key in DECODER_SIDE and self.decoder_positions is not None:
            return self.decoder_positions  # a Whisper config's generic position key names the decoder's
        return self.encoder_positions

    def config(self, declared: tuple[str, ...] | None = None) -> dict[str, int]:
        """The HF config with the limit keys ``declared`` (the published ones when None)."""
        keys = self.native if declared is None else declared
        return {**self.geometry, **{k: self.limit_value(k) for k in DECLARABLE if k in keys}}


def _whisper(size: str, layers: int, heads: int, width: int) -> EncDecFamily:
    geometry = {"encoder_layers": layers, "decoder_layers": layers, "encoder_attention_heads": heads,
                "decoder_attention_heads": heads, "d_model": width, "max_target_positions": 448}  # fmt: skip
    return EncDecFamily(
        f"whisper-{size}", geometry, 1500, (SOURCE_POSITIONS,), audio=True, decoder_positions=448
    )


def _t5(size: str, layers: int, heads: int, width: int) -> EncDecFamily:
    geometry = {
        "num_layers": layers,
        "num_decoder_layers": layers,
        "num_heads": heads,
        "d_model": width,
        "d_kv": 64,
    }
    return EncDecFamily(f"t5-{size}", geometry, 512, ("n_positions",))


def _bart(name: str, layers: int, heads: int, width: int) -> EncDecFamily:
    geometry = {"encoder_layers": layers, "decoder_layers": layers, "encoder_attention_heads": heads,
                "decoder_attention_heads": heads, "d_model": width}  # fmt: skip
    return EncDecFamily(name, geometry, 1024, ("max_position_embeddings",))


FAMILIES: dict[str, EncDecFamily] = {
    f.name: f
    for f in (
        _whisper("large-v3", 32, 20, 1280),  # first: the model, where a shrunk failure lands
        _whisper("medium", 24, 16, 1024),
        _whisper("small", 12, 12, 768),
        _whisper("base", 6, 8, 512),
        _whisper("tiny", 4, 6, 384),
        _t5("small", 6, 8, 512),
        _t5("base", 12, 12, 768),
        _t5("large", 24, 16, 1024),
        _bart("bart-base", 6, 12, 768),
        _bart("bart-large", 12, 16, 1024),
        _bart("mbart-large-cc25", 12, 16, 1024),
    )
}
"""The families the property draws from (sizes as their published configs give them)."""


@dataclass(frozen=True)
class CrossPoolCase:
    """One request of ``encoder_len`` encoder tokens on an engine configured with these settings."""

    family: str
    hf_config: Mapping[str, int] = field(hash=False)
    encoder_len: int
    max_seq_len: int
    max_input_len: int | None
    tokens_per_block: int = DEFAULT_TOKENS_PER_BLOCK

    @property
    def model(self) -> EncDecFamily:
        """The family this case's config belongs to."""
        return FAMILIES[self.family]

    def declared(self) -> list[str]:
        """The encoder-limit keys the config declares, as ``key=value``."""
        return [f"{k}={self.hf_config[k]}" for k in DECLARABLE if k in self.hf_config]

    def refusal(self) -> str | None:
        """Why the engine would never hold this request (None: it is admitted)."""
        e = self.encoder_len
        if self.model.audio:
            if e != self.model.encoder_positions:
                return f"{self.family}'s encoder emits exactly {self.model.encoder_positions} tokens, not {e}"
            return None
        if not e >= 1:
            return "a request has at least one encoder token"
        limits = [self.hf_config[k] for k in DECLARABLE if k in self.hf_config]
        if limits and e > min(limits):
            return f"{e} encoder tokens exceed the encoder's declared limit {min(limits)}"
        if self.max_input_len is not None and self.max_input_len > 0:
            if e > self.max_input_len:
                return f"a {e}-token prompt is longer than max_input_len {self.max_input_len}"
        elif e > self.max_seq_len:
            return f"a {e}-token prompt is longer than max_seq_len {self.max_seq_len}"
        return None

    def layout(self, pool_len: int) -> CrossPool:
        """The engine's pools with a cross pool ``pool_len`` long.

        ``pool_len`` is the engine's own answer, judged as given: a negative
        length (a sizing that subtracts past zero) is a pool that holds no
        token, as a pool of length 0 is, so every request's encoder tokens
        overflow it: "fails", never an error of the judge.
        """
        return CrossPool(self.max_seq_len, max(pool_len, 0), self.tokens_per_block)

    def overflows(self, pool_len: int) -> list[RowUse]:
        """What this request's encoder tokens need beyond a cross pool ``pool_len`` long (empty: fits)."""
        return [
            u for u in write_overflows(self.layout(pool_len), self.encoder_len, 1) if u.row == "cross pool"
        ]

    def describe(self, pool_len: int | None = None) -> list[str]:
        """The case as a report prints it: model, encoder tokens, the engine's settings, the pool."""
        unset = "unset" if self.max_input_len is None else str(self.max_input_len)
        what = "audio frames, fixed" if self.model.audio else "prompt tokens"
        lines = [
            f"model family:   {self.family} (config limit keys: {', '.join(self.declared()) or 'none'})",
            f"encoder tokens: {self.encoder_len} ({what})",
            f"settings:       max_input_len {unset}, max_seq_len {self.max_seq_len}, "
            f"tokens_per_block {self.tokens_per_block}",
        ]
        if pool_len is not None:
            held = self.layout(pool_len).cross_max_len
            negative = " (a negative length: the pool holds no token)" if pool_len < 0 else ""
            lines.append(
                f"cross pool:     {pool_len} tokens ({self.layout(pool_len).blocks(held)} blocks){negative}"
            )
        return lines

    def to_dict(self) -> dict[str, Any]:
        """The case's engine settings and config, as ``check --config`` takes them."""
        return {"family": self.family, "hf_config": dict(self.hf_config), "max_seq_len": self.max_seq_len,
                "max_input_len": self.max_input_len, "tokens_per_block": self.tokens_per_block}  # fmt: skip

    def check_line(self, engine_spec: str) -> str:
        """The ``crossattn-sizing check`` command that judges this case alone under ``engine_spec``."""
        text = json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)
        return shlex.join(["crossattn-sizing", "check", "--engine", engine_spec.strip(), "--config", text,
                           "--encoder-len", str(self.encoder_len)])  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], encoder_len: int) -> CrossPoolCase:
        """A case from ``check --config`` JSON; each bad field is one :class:`ConfigError`."""
        known = {"family", "hf_config", "max_seq_len", "max_input_len", "tokens_per_block"}
        extra = sorted(set(data) - known)
        if extra:
            raise ConfigError(
                extra[0], data[extra[0]], f"not a cross-pool setting (known: {', '.join(sorted(known))})"
            )
        family = data.get("family")
        if family not in FAMILIES:
            raise ConfigError("family", family, f"must be one of {', '.join(FAMILIES)}")
        hf = data.get("hf_config")
        if not isinstance(hf, dict) or not all(_positive(v) for v in hf.values()):
            raise ConfigError("hf_config", hf, "must be an object of positive integers")
        max_seq_len = data.get("max_seq_len")
        if not _positive(max_seq_len):
            raise ConfigError("max_seq_len", max_seq_len, "must be a positive integer")
        max_input_len = data.get("max_input_len")
        if max_input_len is not None and not _positive(max_input_len):
            raise ConfigError("max_input_len", max_input_len, "must be a positive integer or null (unset)")
        tpb = data.get("tokens_per_block", DEFAULT_TOKENS_PER_BLOCK)
        if not _positive(tpb):
            raise ConfigError("tokens_per_block", tpb, "must be a positive integer")
        case = cls(family, dict(hf), encoder_len, int(max_seq_len or 0), max_input_len, int(tpb))
        refused = case.refusal()
        if refused is not None:
            raise ConfigError("--encoder-len", encoder_len, f"not admitted: {refused}")
        return case


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def whisper_large_v3_case() -> CrossPoolCase:
    """Issue 38's case: Whisper-large-v3 (1500 encoder frames) under TensorRT-LLM's defaults
    (``max_input_len`` 1024, the engine's ``max_seq_len`` 2048, 32 tokens a block)."""
    family = FAMILIES["whisper-large-v3"]
    return CrossPoolCase(family.name, family.config(), family.encoder_positions, 2048, 1024)


class CrossPoolNotRun(Exception):
    """The engine's sizing could not be asked about a case (a stand-in used, a changed signature, a crash):
    no verdict either way; the property skips the example with this reason, ``check`` exits 3."""


def harness_stopped(piece: str, exc: BaseException) -> str:
    """The one line saying the harness's own ``piece`` stopped on ``exc``: the reason of a "not run",
    never a verdict on the engine's code, never a traceback (every command of the cross-pool path)."""
    said = described(exc).strip().splitlines()
    return bounded(f"the harness's {piece} stopped ({said[0] if said else type(exc).__name__})")
