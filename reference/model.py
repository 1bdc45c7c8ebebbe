"""Scenarios that tie pool, table, slots, cache and attention together with plain data.

A scenario does what the engine does for one request and one attention layer, with
one head: write K/V through slots into a NaN-poisoned cache, read them back through
the same block-table row, attend. Each DCP rank has its own cache (the row's block ids
name a block in every rank's cache). When the layout is consistent, the result equals
dense attention over the same keys and values; when it is not, the oracle raises
(``ColumnOutOfRange``, ``SlotOutOfRange``) or a poisoned cell turns the output into NaN.

The ``run_*`` functions return everything a property may want to look at; the plain
``paged_*`` functions return only the output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ParamSpec

from .attention import Matrix, attention, merge_partials_with_lse
from .cache import PagedKVCache
from .slots import (
    PAD_SLOT_ID,
    cross_attention_slots,
    global_position,
    local_length,
    local_slots,
    self_attention_slots,
)

P = ParamSpec("P")


@dataclass
class RankRun:
    """One DCP rank's part of a scenario."""

    rank: int
    cache: PagedKVCache
    write_slots: list[int]
    """Slot of each sequence position on this rank, -1 where another rank owns it."""
    read_slots: list[int]
    """Slot of each key this rank's kernel read, in local order."""
    key_positions: list[int]
    """Sequence position of each key read."""
    out: Matrix
    lse: list[float]


@dataclass
class PagedRun:
    """A scenario's result: the (merged) output and lse, and each rank's part."""

    out: Matrix
    lse: list[float]
    ranks: list[RankRun]


def _head_dim(keys: Matrix, values: Matrix, q: Matrix) -> int:
    if len(keys) != len(values):
        raise ValueError(f"{len(keys)} keys but {len(values)} values")
    dims = {len(v) for v in keys + values}
    if len(dims) > 1:
        raise ValueError(f"keys and values must share one head_dim, got lengths {sorted(dims)}")
    if dims:
        return dims.pop()
    return len(q[0]) if q else 1


def _local_positions(
    local_len: int, kernel_block_size: int, dcp_size: int, interleave: int, rank: int
) -> list[int]:
    """Sequence positions of a rank's first ``local_len`` local tokens."""
    return [global_position(j, kernel_block_size, dcp_size, interleave, rank) for j in range(local_len)]


@dataclass(frozen=True)
class Paging:
    """Where a scenario's tokens live: the request's row, each rank's cache, the DCP layout.

    ``row`` holds kernel-block ids (already expanded); each DCP rank's cache has
    ``num_blocks`` blocks of ``kernel_block_size`` cells; ``dcp_size`` ranks
    deal positions out in runs of ``interleave``. Self- and cross-attention
    scenarios take the same record.
    """

    row: list[int]
    kernel_block_size: int
    num_blocks: int
    dcp_size: int = 1
    interleave: int = 1


@dataclass(frozen=True)
class _Layer:
    """What every rank of one scenario shares: the paging, the head size, the queries."""

    paging: Paging
    head_dim: int
    q: Matrix
    scale: float
    causal: bool
    q_positions: list[int] | None


def write_sequence(cache: PagedKVCache, write_slots: list[int], keys: Matrix, values: Matrix) -> None:
    """Scatter token ``i``'s key and value into ``write_slots[i]``; -1 writes nothing."""
    for slot, key, value in zip(write_slots, keys, values, strict=True):
        if slot != PAD_SLOT_ID:
            cache.write(slot, key, value)


def _run_rank(
    layer: _Layer, rank: int, write_slots: list[int], keys: Matrix, values: Matrix, key_positions: list[int]
) -> RankRun:
    """One rank: write into a fresh poisoned cache, read ``len(key_positions)`` tokens back, attend."""
    paging = layer.paging
    cache = PagedKVCache(paging.num_blocks, paging.kernel_block_size, layer.head_dim)
    write_sequence(cache, write_slots, keys, values)
    read_slots = local_slots(paging.row, len(key_positions), paging.kernel_block_size)
    cells = [cache.read(slot) for slot in read_slots]
    out, lse = attention(
        layer.q,
        [key for key, _ in cells],
        [value for _, value in cells],
        layer.scale,
        causal=layer.causal,
        q_positions=layer.q_positions,
        k_positions=key_positions,
        head_dim_v=layer.head_dim,
    )
    return RankRun(rank, cache, write_slots, read_slots, key_positions, out, lse)


def _run_sharded(layer: _Layer, keys: Matrix, values: Matrix) -> PagedRun:
    """Every rank writes the positions ``0..len(keys)-1`` it owns, reads back its share, attends.

    Sharded cross-attention and self-attention differ only in the layer (causal or
    not, query positions): both write with the self-attention mapping over the whole
    sequence (``self_attention_slots`` over ``range(e)``), so one loop serves
    both. The partials are merged by log-sum-exp.
    """
    seq_len = len(keys)
    paging = layer.paging
    kbs, dcp_size, interleave = paging.kernel_block_size, paging.dcp_size, paging.interleave
    ranks: list[RankRun] = []
    for rank in range(dcp_size):
        write_slots = self_attention_slots(
            paging.row, range(seq_len), kbs, dcp_size, interleave, rank, seq_len
        )
        local_len = local_length(seq_len, dcp_size, interleave, rank)
        positions = _local_positions(local_len, kbs, dcp_size, interleave, rank)
        ranks.append(_run_rank(layer, rank, write_slots, keys, values, positions))
    out, lse = merge_partials_with_lse([(r.out, r.lse) for r in ranks])
    return PagedRun(out, lse, ranks)


def _output_of(run: Callable[P, PagedRun], name: str, doc: str) -> Callable[P, Matrix]:
    """The plain ``paged_*`` twin of a ``run_*`` scenario: the same arguments, only the output.

    Built from the run itself so the two cannot drift apart in parameters or defaults.
    """

    def output(*args: P.args, **kwargs: P.kwargs) -> Matrix:
        return run(*args, **kwargs).out

    output.__name__ = output.__qualname__ = name
    output.__doc__ = doc
    return output


def run_paged_cross_attention(
    q: Matrix,
    encoder_keys: Matrix,
    encoder_values: Matrix,
    paging: Paging,
    scale: float,
    sharded: bool = False,
) -> PagedRun:
    """Cross-attention of decoder queries over ``e = len(encoder_keys)`` encoder tokens.

    - ``sharded=False`` models the engine: DCP is ignored, every position is written
      with ``row[p // kbs]*kbs + p % kbs`` and all ``e`` keys are read back. Every rank
      would do the same and merging identical partials changes nothing, so one rank is
      modelled and the paging's ``dcp_size``/``interleave`` are not used. A row sized for ``C > 1``
      is too short here and raises ``ColumnOutOfRange``.
    - ``sharded=True`` models the consistent variant: rank ``r`` writes the positions it
      owns (self-attention mapping), reads back its ``local_length`` tokens, attends
      over them, and the partials are merged by log-sum-exp.

    Cross-attention is not causal: every query sees every encoder key.
    """
    head_dim = _head_dim(encoder_keys, encoder_values, q)
    layer = _Layer(paging, head_dim, q, scale, causal=False, q_positions=None)
    encoder_len = len(encoder_keys)
    if not sharded:
        write_slots = cross_attention_slots(paging.row, encoder_len, paging.kernel_block_size, encoder_len)
        only = _run_rank(layer, 0, write_slots, encoder_keys, encoder_values, list(range(encoder_len)))
        return PagedRun(only.out, only.lse, [only])

    return _run_sharded(layer, encoder_keys, encoder_values)


paged_cross_attention = _output_of(
    run_paged_cross_attention,
    "paged_cross_attention",
    "The output of ``run_paged_cross_attention`` (merged over ranks when sharded).",
)


def run_paged_self_attention(
    q: Matrix,
    q_positions: list[int],
    keys: Matrix,
    values: Matrix,
    paging: Paging,
    scale: float,
) -> PagedRun:
    """Causal self-attention over a context of ``s = len(keys)`` tokens at positions ``0..s-1``.

    Each rank writes the positions it owns (``self_attention_slots``), reads back its
    ``local_length(s)`` tokens through the paging's ``row`` and attends causally, using
    ``global_position`` to know each key's position; the partials are merged by
    log-sum-exp. Queries at ``q_positions`` see keys at positions ``<=`` their own.
    """
    head_dim = _head_dim(keys, values, q)
    layer = _Layer(paging, head_dim, q, scale, True, list(q_positions))
    return _run_sharded(layer, keys, values)


paged_self_attention = _output_of(
    run_paged_self_attention, "paged_self_attention", "The merged output of ``run_paged_self_attention``."
)
