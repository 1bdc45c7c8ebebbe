"""What the harness needs to know about a model family, in one record.

A family is registered in :mod:`crossattn_sizing.models.families` (one module
per family, one line in the registry). Each gives: its CLI name and
``model_type``; the config adapter (the class a config.json is built with and
the field checks it needs); the encoder-token rule (how many encoder tokens
one request has); and, for the transformers differential property, the HF
module builder (the decoder's cross-attention class), where it applies the
softmax scale, a tiny config and a strategy for request lengths. The CLI
(``reproduce``), the adapters and the properties read these fields; none of
them names a family.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from crossattn_sizing.base.errors import ConfigError


@dataclass(frozen=True)
class Derived:
    """A value and the one-line reason it has that value (printed by ``reproduce``)."""

    value: int
    why: str


def int_field(config: Any, key: str) -> int | None:
    """An int field of a config, ``None`` when absent or not an int (a bool is not one)."""
    value = getattr(config, key, None)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


EncoderRule = Callable[[Any, "tuple[int, int] | None", "int | None"], Derived]
"""``(hf_config, image_size, source_len) -> Derived``; refuses an input that does not apply."""

LengthDraw = Callable[[st.DrawFn, int, int], "tuple[int, int | None, tuple[int, ...]]"]
"""``(draw, block_size, num_requests) -> (length_field, source_positions, encoder_lens)``."""


@dataclass(frozen=True)
class KnownCase:
    """The shape ``reproduce NAME`` runs where the user gives none: a real input where the sizing bites.

    A field left ``None`` falls back to what the config derives. ``why`` is
    said beside a value taken from here, so the output tells a default the
    reproducer chose from one the config gave.
    """

    max_model_len: int | None = None
    image_size: tuple[int, int] | None = None  # for a family that ``takes_image_size``
    why: str = ""


@dataclass(frozen=True)
class Family:
    """One model family: its adapter, encoder-token rule, HF module builder and strategy."""

    name: str  # the CLI name (``reproduce NAME``)
    model_type: str  # the config's ``model_type``
    encoder_len: EncoderRule
    config_class: Callable[..., Any] | None = None  # None: transformers' AutoConfig.for_model
    check_fields: Callable[[Mapping[str, Any]], None] | None = None
    takes_image_size: bool = False
    known_case: KnownCase | None = None  # ``reproduce NAME``'s defaults, where it has some
    # The transformers differential property (None where transformers has no module for it):
    attention_class: Callable[[], type] | None = None
    query_prescaled: bool = False  # the module scales q_proj's output instead of the scores
    tiny_config: Callable[..., Any] | None = None  # (length_field, source_positions, **dims) -> config
    draw_lengths: LengthDraw | None = None


def refuse_source_len(source_len: int | None, why: str) -> None:
    """A family whose encoder tokens are fixed by the config refuses a given count."""
    if source_len is not None:
        raise ConfigError("encoder_len", source_len, why)


def edge_lengths(limit: int, block_size: int) -> list[int]:
    """Lengths at and one past block edges, and the limit: where off-by-one sizing shows."""
    edges = {limit, limit - 1, block_size, block_size + 1, 2 * block_size, 2 * block_size + 1, 1}
    return sorted(x for x in edges if 1 <= x <= limit)


def near_edges(limit: int, block_size: int) -> st.SearchStrategy[int]:
    """A length in ``1..limit``, often on a block edge."""
    return st.one_of(st.sampled_from(edge_lengths(limit, block_size)), st.integers(1, limit))
