"""The three ways engines lay a request's KV ids out, engine-neutral (pure Python, no torch).

- :class:`RowPerGroup` (vLLM): one block-table row per KV-cache group, width
  in entries fixed at start-up by a sizing policy; encoder tokens live in the
  cross-attention group's row, decoder tokens in the others.
- :class:`SharedRow` (SGLang): one ``req_to_token`` row per request, in token
  units, encoder tokens first and the decoder's after them,
  ``[E encoder | d decoder]``; the row is ``context_len + 4`` wide (plus any
  speculative draft tokens).
- :class:`CrossPool` (TensorRT-LLM): the decoder's self-attention pool and a
  separate cross pool, each with its own maximum sequence length.

Each layout answers the same two questions the write-side property asks
(:func:`write_overflows`): which rows a request of ``E`` encoder and ``d``
decoder tokens uses, how many units each needs and how wide each is; the
read-side property (:mod:`crossattn_sizing.core.read_gather`) also needs the
columns a request's tokens were written to (:meth:`SharedRow.written`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from crossattn_sizing.core import admission
from crossattn_sizing.core.config import GroupKind, RunnerConfig

SGLANG_EXTRA_CONTEXT = 4
"""Entries SGLang adds to ``context_len`` for the row width (``kv_cache_configurator.py``:
``extra_max_context_len = 4``, plus the speculative draft tokens)."""


class RowUse(NamedTuple):
    """One row a request uses: its name, the units it needs and the row's width, in ``unit``."""

    row: str
    needed: int
    width: int
    unit: str


class Layout(Protocol):
    """A layout: the rows a request of ``encoder_len`` and ``decoder_len`` tokens fills."""

    @property
    def name(self) -> str:
        """The layout's name in reports (read-only: the layouts are frozen dataclasses)."""
        ...

    def rows(self, encoder_len: int, decoder_len: int) -> list[RowUse]:
        """Every row the request uses, with what it needs and what the row holds."""
        ...


@dataclass(frozen=True)
class RowPerGroup:
    """vLLM: a row per KV-cache group, ``widths[g]`` entries wide (what a sizing policy gave)."""

    config: RunnerConfig
    widths: Sequence[int]
    name: str = "row-per-group"

    def rows(self, encoder_len: int, decoder_len: int) -> list[RowUse]:
        """One row per attention group, each against its own width."""
        out = []
        for gi, group in enumerate(self.config.groups):
            if not group.kind.is_attention:
                continue
            tokens = encoder_len if group.kind is GroupKind.CROSS else decoder_len
            needed = admission.entries_needed(self.config, group, tokens)
            out.append(RowUse(f"group {gi} ({group.kind.value})", needed, self.widths[gi], "entries"))
        return out


@dataclass(frozen=True)
class SharedRow:
    """SGLang: one row per request, ``[E encoder | d decoder]``, in tokens.

    Extend writes the encoder's ids at columns ``[0, E)`` and the decoder's
    after them (``prepare_encoder_info_extend`` strips the encoder part out of
    ``seq_lens``, which then count decoder tokens only); a decode step writes
    its token at ``E + seq_len`` (``alloc_for_decode_default``).
    """

    context_len: int
    draft_tokens: int = 0
    name: str = "shared-row"

    def __post_init__(self) -> None:
        if self.context_len < 1 or self.draft_tokens < 0:
            raise ValueError(f"invalid shared-row layout {self}")

    @property
    def width(self) -> int:
        """``context_len + 4 (+ draft tokens)``: ``ReqToTokenPool``'s ``max_context_len``."""
        return self.context_len + SGLANG_EXTRA_CONTEXT + self.draft_tokens

    def written(self, encoder_len: int, decoder_len: int) -> range:
        """Columns holding this request's ids: ``[0, E + d)``."""
        return range(encoder_len + decoder_len)

    def decode_column(self, encoder_len: int, seq_len: int) -> int:
        """Where a decode step writes its token: ``encoder_lens + seq_lens``."""
        return encoder_len + seq_len

    def rows(self, encoder_len: int, decoder_len: int) -> list[RowUse]:
        """One row holding encoder and decoder tokens together (SGLang's ``req_to_token``)."""
        return [RowUse("req_to_token", encoder_len + decoder_len, self.width, "tokens")]


@dataclass(frozen=True)
class CrossPool:
    """TensorRT-LLM: a self-attention pool and a cross pool, each with its own maximum length.

    One cross pool per engine, sized once at start-up (``cross_max_len``: what
    ``KvCacheCreator._get_cross_kv_cache_layout`` returns). A request's encoder
    tokens must fit that length, and they are stored in blocks of
    ``tokens_per_block``, so they must also fit the blocks a sequence of the
    pool's length gets: ``ceil(E / tpb) <= ceil(cross_max_len / tpb)``
    (implied by the first, and stated anyway: the block count is what the
    manager allocates).
    """

    self_max_len: int
    cross_max_len: int
    tokens_per_block: int = 32  # TensorRT-LLM's default KvCacheConfig tokens_per_block
    name: str = "cross-pool"

    def __post_init__(self) -> None:
        if self.self_max_len < 1 or self.cross_max_len < 0 or self.tokens_per_block < 1:
            raise ValueError(f"invalid cross-pool layout {self}")

    def blocks(self, tokens: int) -> int:
        """Blocks of ``tokens_per_block`` that ``tokens`` tokens occupy."""
        return -(-tokens // self.tokens_per_block)

    def rows(self, encoder_len: int, decoder_len: int) -> list[RowUse]:
        """The self pool holds the decoder tokens, the cross pool the encoder ones (tokens, then blocks)."""
        out = [RowUse("self pool", decoder_len, self.self_max_len, "tokens")]
        if encoder_len:
            out.append(RowUse("cross pool", encoder_len, self.cross_max_len, "tokens"))
            blocks = self.blocks(encoder_len), self.blocks(self.cross_max_len)
            out.append(RowUse("cross pool", *blocks, "blocks"))
        return out


def write_overflows(layout: Layout, encoder_len: int, decoder_len: int) -> list[RowUse]:
    """The rows of ``layout`` a request of these lengths would write past (empty: it fits)."""
    return [use for use in layout.rows(encoder_len, decoder_len) if use.needed > use.width]
