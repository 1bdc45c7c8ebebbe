"""The runner-config model: what an engine knows at start-up when it sizes its block tables.

Validation mirrors the engine's own start-up checks, so a config the harness
accepts is one the engine would start with; anything else raises
:class:`~crossattn_sizing.base.errors.ConfigError` naming the field, the value and
the rule. ``max_source_positions=None`` means the model config has no such
field, which is not the same as a field holding 0.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from crossattn_sizing.base.errors import ConfigError
from crossattn_sizing.base.limits import MAX_BLOCK_SIZE, MAX_NUM_REQS


class GroupKind(str, enum.Enum):
    """The kind of a KV-cache group, which decides how its width is computed."""

    FULL = "full"
    CROSS = "cross"
    SLIDING_WINDOW = "sliding_window"
    MAMBA = "mamba"

    @property
    def is_attention(self) -> bool:
        """Attention groups store token blocks; mamba groups store state blocks."""
        return self is not GroupKind.MAMBA


def _require_int(name: str, value: object, minimum: int, maximum: int | None = None) -> None:
    # bool is an int subclass; True as a block size is a typo, not a size.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, value, "must be an integer")
    if value < minimum:
        raise ConfigError(name, value, f"must be >= {minimum}")
    if maximum is not None and value > maximum:  # a bound where the value becomes memory (see limits)
        raise ConfigError(name, value, f"must be <= {maximum}")


def _require_bool(name: str, value: object) -> None:
    # JSON "false" is a non-empty string, hence truthy: only a real boolean means what it says.
    if not isinstance(value, bool):
        raise ConfigError(name, value, "must be true or false")


@dataclass(frozen=True)
class KVCacheGroup:
    """One KV-cache group: every layer in it shares one block table.

    ``kernel_block_size`` defaults to ``block_size``; when it is smaller the row
    stores kernel-block ids (``b*bpk + k``), ``bpk`` entries per manager block.
    ``dcp_sharded`` says whether the group's KV is split across DCP ranks (the
    width then divides by the DCP size) or replicated on every rank.
    """

    kind: GroupKind
    block_size: int
    kernel_block_size: int | None = None
    dcp_sharded: bool = True

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", GroupKind(self.kind))
        except ValueError:
            allowed = ", ".join(k.value for k in GroupKind)
            raise ConfigError("kind", self.kind, f"must be one of {allowed}") from None
        _require_int("block_size", self.block_size, 1, MAX_BLOCK_SIZE)
        _require_bool("dcp_sharded", self.dcp_sharded)
        if self.kernel_block_size is None:
            object.__setattr__(self, "kernel_block_size", self.block_size)
        _require_int("kernel_block_size", self.kernel_block_size, 1, MAX_BLOCK_SIZE)
        if self.block_size % self.kbs:
            raise ConfigError(
                "kernel_block_size",
                self.kernel_block_size,
                f"must divide block_size={self.block_size}",
            )

    @property
    def kbs(self) -> int:
        """Kernel block size (never None after validation)."""
        assert self.kernel_block_size is not None  # set in __post_init__
        return self.kernel_block_size

    @property
    def bpk(self) -> int:
        """Kernel blocks per manager block: how many row entries one block id becomes."""
        return self.block_size // self.kbs

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields; defaults are left out so reproduce commands stay short."""
        out: dict[str, Any] = {"kind": self.kind.value, "block_size": self.block_size}
        if self.kbs != self.block_size:
            out["kernel_block_size"] = self.kbs
        if not self.dcp_sharded:
            out["dcp_sharded"] = False
        return out


@dataclass(frozen=True)
class RunnerConfig:
    """What the model runner sizes its block tables from.

    Symbols of docs/spec.md §1: ``M = max_model_len``, ``B = max_num_batched_tokens``,
    ``E = max_num_encoder_input_tokens`` (defaults to ``B``, as in the scheduler),
    ``S = max_source_positions`` (``None`` = absent), ``C = dcp_size``,
    ``I = dcp_interleave``.
    """

    max_model_len: int
    max_num_batched_tokens: int
    groups: tuple[KVCacheGroup, ...]
    max_num_encoder_input_tokens: int | None = None
    max_source_positions: int | None = None
    dcp_size: int = 1
    dcp_interleave: int = 1
    max_num_reqs: int = 8
    is_encoder_decoder: bool = True
    prefix_caching: bool = False
    num_speculative_blocks: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", tuple(self.groups))
        _require_int("max_model_len", self.max_model_len, 1)
        _require_int("max_num_batched_tokens", self.max_num_batched_tokens, 1)
        if self.max_num_encoder_input_tokens is not None:
            _require_int("max_num_encoder_input_tokens", self.max_num_encoder_input_tokens, 1)
        if self.max_source_positions is not None:
            _require_int("max_source_positions", self.max_source_positions, 0)
        _require_int("dcp_size", self.dcp_size, 1)
        _require_int("dcp_interleave", self.dcp_interleave, 1)
        _require_int("max_num_reqs", self.max_num_reqs, 1, MAX_NUM_REQS)
        _require_int("num_speculative_blocks", self.num_speculative_blocks, 0)
        _require_bool("is_encoder_decoder", self.is_encoder_decoder)
        _require_bool("prefix_caching", self.prefix_caching)
        if not self.groups:
            raise ConfigError("groups", self.groups, "must hold at least one KV-cache group")
        for i, group in enumerate(self.groups):
            if not isinstance(group, KVCacheGroup):
                raise ConfigError(f"groups[{i}]", group, "must be a KVCacheGroup")
        if self.is_encoder_decoder and self.max_num_batched_tokens < self.max_model_len:
            raise ConfigError(
                "max_num_batched_tokens",
                self.max_num_batched_tokens,
                f"must be >= max_model_len={self.max_model_len}: encoder-decoder models run "
                "with chunked prefill off",
            )
        if not self.is_encoder_decoder:
            for i, group in enumerate(self.groups):
                if group.kind is GroupKind.CROSS:
                    raise ConfigError(
                        f"groups[{i}].kind", "cross", "cross-attention needs an encoder-decoder model"
                    )
        if self.dcp_size > 1:
            for i, group in enumerate(self.groups):
                if not (group.kind.is_attention and group.dcp_sharded):
                    continue
                if self.dcp_interleave > group.block_size or group.block_size % self.dcp_interleave:
                    raise ConfigError(
                        "dcp_interleave",
                        self.dcp_interleave,
                        f"must divide groups[{i}].block_size={group.block_size} when dcp_size > 1",
                    )
                if group.kbs % self.dcp_interleave:
                    raise ConfigError(
                        "dcp_interleave",
                        self.dcp_interleave,
                        f"must divide groups[{i}].kernel_block_size={group.kbs} when dcp_size > 1 "
                        "(slot mapping interleaves within kernel blocks)",
                    )

    # Derived quantities, named after docs/spec.md §1.
    @property
    def encoder_budget(self) -> int:
        """``E``: the scheduler's encoder-token budget (defaults to ``B``)."""
        if self.max_num_encoder_input_tokens is None:
            return self.max_num_batched_tokens
        return self.max_num_encoder_input_tokens

    @property
    def source_positions(self) -> int:
        """``S`` as the width formula reads it: 0 when the field is absent."""
        return self.max_source_positions or 0

    def dcp_factor(self, group: KVCacheGroup) -> int:
        """``C_g``: the DCP size for sharded attention groups, 1 for replicated ones."""
        if group.kind.is_attention and group.dcp_sharded:
            return self.dcp_size
        return 1

    def cross_groups(self) -> list[int]:
        """Indices of the cross-attention groups."""
        return [i for i, g in enumerate(self.groups) if g.kind is GroupKind.CROSS]

    def replace(self, **changes: Any) -> RunnerConfig:
        """A copy with fields changed, validated like a new config."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict that :meth:`from_dict` reads back; fields at their default are left out."""
        out: dict[str, Any] = {}
        for name, default in _SCALAR_FIELDS:
            value = getattr(self, name)
            if default is dataclasses.MISSING or value != default:
                out[name] = value
        out["groups"] = [g.to_dict() for g in self.groups]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunnerConfig:
        """Build a config from JSON-like data; unknown fields are an error, not ignored."""
        if not isinstance(data, Mapping):
            raise ConfigError("config", type(data).__name__, "must be a JSON object")
        known = _KNOWN_FIELDS
        if cls is not RunnerConfig:  # a subclass may add fields
            known = frozenset(f.name for f in dataclasses.fields(cls)) - {"extra"}
        for key in data:
            if key not in known:
                raise ConfigError(key, data[key], f"unknown field; known fields: {sorted(known)}")
        for key in ("max_model_len", "max_num_batched_tokens", "groups"):
            if key not in data:
                raise ConfigError(key, None, "is required")
        raw_groups = data["groups"]
        if not isinstance(raw_groups, (list, tuple)):
            raise ConfigError("groups", raw_groups, "must be a list of groups")
        group_fields = _GROUP_FIELDS
        groups = []
        for i, g in enumerate(raw_groups):
            if not isinstance(g, Mapping):
                raise ConfigError(f"groups[{i}]", g, "must be an object")
            for key in g:
                if key not in group_fields:
                    raise ConfigError(f"groups[{i}].{key}", g[key], "unknown field")
            if "kind" not in g or "block_size" not in g:
                raise ConfigError(f"groups[{i}]", dict(g), "needs kind and block_size")
            groups.append(KVCacheGroup(**g))
        kwargs = dict(data)
        kwargs["groups"] = tuple(groups)
        return cls(**kwargs)

    def describe(self) -> str:
        """One line a failure message can show."""
        s = "absent" if self.max_source_positions is None else str(self.max_source_positions)
        groups = ", ".join(
            f"{g.kind.value}(bs={g.block_size}"
            + (f", kbs={g.kbs}" if g.kbs != g.block_size else "")
            + ("" if g.dcp_sharded or self.dcp_size == 1 else ", replicated")
            + ")"
            for g in self.groups
        )
        sharding = f", C={self.dcp_size}, I={self.dcp_interleave}" if self.dcp_size > 1 else ""
        return (
            f"M={self.max_model_len}, B={self.max_num_batched_tokens}, E={self.encoder_budget}, "
            f"S={s}{sharding}, groups=[{groups}]"
        )


_SCALAR_FIELDS = tuple(
    (f.name, f.default) for f in dataclasses.fields(RunnerConfig) if f.name not in ("groups", "extra")
)
"""``(name, default)`` of the fields :meth:`RunnerConfig.to_dict` writes as they are (read once:
``prove`` serialises millions of configs for an engine policy's worker)."""

_KNOWN_FIELDS = frozenset(f.name for f in dataclasses.fields(RunnerConfig)) - {"extra"}
_GROUP_FIELDS = frozenset(f.name for f in dataclasses.fields(KVCacheGroup))
"""The field names :meth:`RunnerConfig.from_dict` accepts, read once (a worker reads millions)."""
