"""What engine names mean in terms of the harness's RunnerConfig.

This table is the audit's knowledge of vLLM's names (the stand-ins for engine
helpers are in :mod:`.standins`); every mapping is a name the engine's config
classes or utilities define, and nothing else is inferred.
An attribute name not listed here is unknown, and the policy that needs it is
reported as "could not be read" with that name.

Modelling choices (each a departure the report can name):
- prefill context parallelism is absent (size 1): the harness models DCP only;
- the audited DCP rank is 0 (widths do not depend on the rank);
- kernel block sizes are the harness groups' ``kernel_block_size``, whatever
  the backend-selection helper computes them from (see :mod:`.standins`);
- each harness group stands for an instance of exactly the spec class
  ``KIND_SPEC_CLASS`` names (a full group is a plain ``FullAttentionSpec``,
  not an MLA or sink variant): ``isinstance`` is then answered from the
  release's own class tree in ``vllm/v1/kv_cache_interface.py``, so a spec
  class a release adds (``CircularBufferSpec`` in 0.29.0) needs no entry here.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from crossattn_sizing.audit.modules import ModuleIndex
from crossattn_sizing.audit.values import GroupVal, SpecVal, Sym, TList, Unknown
from crossattn_sizing.core.config import GroupKind, RunnerConfig


class Context(Protocol):
    """What a known function or stand-in may use of the evaluator."""

    config: RunnerConfig
    index: ModuleIndex

    def attribute(self, obj: Any, name: str) -> Any:
        """``obj.name`` under the audit's rules."""
        ...

    def spec_isinstance(self, spec: SpecVal, cls: Any) -> bool:
        """``isinstance(spec, cls)`` from the release's class tree; NotEvaluable when it cannot tell."""
        ...


KnownFn = Callable[[Context, list[Any], dict[str, Any]], Any]


class NotEvaluable(Exception):
    """Raised by a known function for arguments it cannot compute with; becomes an Unknown."""


def _groups(config: RunnerConfig) -> TList:
    return TList(GroupVal(i, g) for i, g in enumerate(config.groups))


def _source_positions(config: RunnerConfig) -> Any:
    if config.max_source_positions is None:
        return Unknown("hf_config has no max_source_positions: the engine would raise AttributeError")
    return config.max_source_positions


# Config attribute name -> value, for attributes of any engine config object.
CONFIG_ATTRS: dict[str, Callable[[RunnerConfig], Any]] = {
    "max_model_len": lambda c: c.max_model_len,
    "max_num_batched_tokens": lambda c: c.max_num_batched_tokens,
    "max_num_encoder_input_tokens": lambda c: c.encoder_budget,
    "max_source_positions": _source_positions,
    "decode_context_parallel_size": lambda c: c.dcp_size,
    "cp_kv_cache_interleave_size": lambda c: c.dcp_interleave,
    "prefill_context_parallel_size": lambda c: 1,
    "max_num_seqs": lambda c: c.max_num_reqs,
    "is_encoder_decoder": lambda c: c.is_encoder_decoder,
    "enable_prefix_caching": lambda c: c.prefix_caching,
    "kv_cache_groups": _groups,
}

# Attributes whose presence depends on the model config (``getattr(x, name, default)``).
OPTIONAL_ATTRS: dict[str, Callable[[RunnerConfig], int | None]] = {
    "max_source_positions": lambda c: c.max_source_positions,
}


SPEC_DATA_ATTRS = ("block_size", "num_speculative_blocks", "dcp_sharded")

# The engine's spec class standing for each harness group kind, whose methods
# (e.g. ``max_num_blocks_per_req``) are read from the release's own source.
SPEC_MODULE = "vllm.v1.kv_cache_interface"
KIND_SPEC_CLASS: dict[GroupKind, str] = {
    GroupKind.CROSS: "CrossAttentionSpec",
    GroupKind.FULL: "FullAttentionSpec",
    GroupKind.SLIDING_WINDOW: "SlidingWindowSpec",
    GroupKind.MAMBA: "MambaSpec",
}


def spec_attr(config: RunnerConfig, spec: SpecVal, name: str) -> Any:
    """A data attribute of a group's ``kv_cache_spec`` (methods are read from the source)."""
    if name == "block_size":
        return spec.group.block_size
    if name == "num_speculative_blocks" and spec.group.kind is GroupKind.MAMBA:
        return config.num_speculative_blocks
    if name == "dcp_sharded":  # whether DCP splits the group's tokens: the harness's dcp_factor rule
        return spec.group.kind.is_attention and spec.group.dcp_sharded
    return Unknown(f"kv_cache_spec.{name} has no counterpart in the harness config")


def _ints(values: Iterable[Any], what: str) -> list[int]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise NotEvaluable(f"{what} of a non-integer")
        out.append(v)
    return out


def _extreme(pick: Callable[..., Any], name: str) -> Callable[..., Any]:
    def fn(ctx: Context, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if set(kwargs) - {"default"}:
            raise NotEvaluable(f"{name}() with key=")
        items = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
        if not items and "default" in kwargs:
            return kwargs["default"]
        return pick(_ints(items, f"{name}()"))

    return fn


def _pos(fn: Callable[..., Any]) -> KnownFn:
    def wrapped(ctx: Context, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if kwargs:
            raise NotEvaluable("keyword arguments")
        return fn(*args)

    return wrapped


def _int_pos(fn: Callable[..., int]) -> KnownFn:
    def wrapped(ctx: Context, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if kwargs:
            raise NotEvaluable("keyword arguments")
        return fn(*_ints(args, "arithmetic"))

    return wrapped


def _isinstance(ctx: Context, args: list[Any], kwargs: dict[str, Any]) -> Any:
    obj, classes = args
    if obj is None:
        return False
    results = []
    for cls in classes if isinstance(classes, tuple) else (classes,):
        name = getattr(cls, "name", None)
        if isinstance(obj, SpecVal):
            results.append(ctx.spec_isinstance(obj, cls))
        elif isinstance(obj, GroupVal) and name == "KVCacheGroupSpec":
            results.append(True)
        else:
            raise NotEvaluable(f"isinstance(..., {name or cls!r})")
    return any(results)


def _getattr(ctx: Context, args: list[Any], kwargs: dict[str, Any]) -> Any:
    obj, name, *rest = args
    if not isinstance(name, str):
        raise NotEvaluable("getattr() with a computed name")
    if rest and isinstance(obj, Sym) and name in OPTIONAL_ATTRS:
        value = OPTIONAL_ATTRS[name](ctx.config)
        return rest[0] if value is None else value
    value = ctx.attribute(obj, name)
    if isinstance(value, Sym) and rest:
        return Unknown(f"getattr({obj.path if isinstance(obj, Sym) else obj!r}, {name!r}): not a known field")
    return value


def _hasattr(ctx: Context, args: list[Any], kwargs: dict[str, Any]) -> Any:
    obj, name = args
    if isinstance(obj, Sym) and name in OPTIONAL_ATTRS:
        return OPTIONAL_ATTRS[name](ctx.config) is not None
    raise NotEvaluable(f"hasattr(..., {name!r})")


class DcpGroup:
    """``get_dcp_group()``: its ``world_size`` is the DCP size; rank 0 is audited."""

    def __init__(self, size: int) -> None:
        self.world_size = size
        self.rank_in_group = 0


def _sequence(kind: type) -> KnownFn:
    def fn(ctx: Context, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if kwargs or len(args) > 1:
            raise NotEvaluable(f"{kind.__name__}() arguments")
        items = list(args[0]) if args else []
        return TList(items) if kind is list else tuple(items)

    return fn


def _range(*args: Any) -> range:
    return range(*_ints(args, "range()"))


# Builtins and engine utilities by the name they are called by.
KNOWN_FUNCTIONS: dict[str, KnownFn] = {
    "max": _extreme(max, "max"),
    "min": _extreme(min, "min"),
    "len": _pos(len),
    "range": _pos(_range),
    "zip": _pos(lambda *xs: TList(zip(*xs, strict=False))),
    "enumerate": _pos(lambda xs, start=0: TList(enumerate(xs, start))),
    "int": _int_pos(int),
    "abs": _int_pos(abs),
    "sum": _pos(lambda xs: sum(_ints(xs, "sum()"))),
    "bool": _pos(bool),
    "all": _pos(all),
    "any": _pos(any),
    "list": _sequence(list),
    "tuple": _sequence(tuple),
    "isinstance": _isinstance,
    "getattr": _getattr,
    "hasattr": _hasattr,
    "deepcopy": _pos(copy.copy),  # the copy is never mutated by what the audit follows
    "cdiv": _int_pos(lambda a, b: -(a // -b)),
    "round_up": _int_pos(lambda x, y: ((x + y - 1) // y) * y),
    "round_down": _int_pos(lambda x, y: (x // y) * y),
    "gcd": _int_pos(math.gcd),
    "lcm": _int_pos(lambda a, b: a * b // math.gcd(a, b)),
}

# Known functions that compute with ints only: an engine object passed to one is an unknown name.
ARITHMETIC = frozenset(
    {"max", "min", "len", "range", "int", "abs", "sum", "cdiv", "round_up", "round_down", "gcd", "lcm"}
)
# Qualified names of standard-library modules used as ``math.gcd`` and the like.
KNOWN_QUALIFIED: dict[str, KnownFn] = {
    "math.gcd": KNOWN_FUNCTIONS["gcd"],
    "math.lcm": KNOWN_FUNCTIONS["lcm"],
    "copy.deepcopy": KNOWN_FUNCTIONS["deepcopy"],
    "copy.copy": KNOWN_FUNCTIONS["deepcopy"],
}
