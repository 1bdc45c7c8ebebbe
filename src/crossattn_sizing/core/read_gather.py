"""The read side of a shared-row layout: which columns a metadata builder gathers, through a guard.

A write-side check asks whether every token has a column. The read side can
still fail when it holds: an attention backend builds its page table by
*gathering* columns of each request's row, and a gather shaped by the batch
(its longest decoder, its largest encoder) instead of by the request can index
past a row its own tokens fit in. SGLang 0.5.23's FA3 backend gathers the
self-attention page table as ``encoder_lens[i] + arange(max_j d_j)``
(``flashattention_backend.py``, eager path and CUDA-graph replay): with a large
encoder beside a long text-only decoder, columns run past ``context_len + 4``.

:class:`GuardedRows` is the table reads go through: each row is ``width``
wide, columns a request never wrote hold :data:`UNWRITTEN`, and the first read
past a row raises :class:`ReadOutOfRow` naming row, column and width before
anything past it is read. A builder is a function from a batch to the
:class:`Gather` list it reads; :func:`first_read_violation` runs one over a
table and says what went wrong first, or None.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from crossattn_sizing.core.layouts import SharedRow

UNWRITTEN = -1
"""The id in a column no token of the row's request was written to."""


class BatchRequest(NamedTuple):
    """One request of a decode batch: ``encoder_len`` encoder tokens, ``decoder_len`` decoder tokens."""

    encoder_len: int
    decoder_len: int


class Gather(NamedTuple):
    """The columns a builder gathers from one request's row for one attention.

    ``consumed`` leading columns are what the kernel reads (its per-request
    ``cache_seqlens``); columns after them are gathered but masked.
    """

    row: int
    attention: str
    columns: range
    consumed: int


Builder = Callable[[Sequence[BatchRequest]], list[Gather]]
"""A metadata builder: a batch (row ``i`` is request ``i``) to the gathers its page tables make."""


class ReadOutOfRow(IndexError):
    """A gather indexed a column past its row: on CPU an IndexError, on a GPU a device-side assert."""

    def __init__(self, row: int, column: int, width: int, attention: str) -> None:
        self.row, self.column, self.width, self.attention = row, column, width, attention
        super().__init__(f"{attention}-attention gather read row {row} column {column}, "
                         f"past the row (width {width}: columns 0..{width - 1})")


@dataclass
class GuardedRows:
    """Rows of ``width`` ids that refuse any read past a row, counting every read."""

    width: int
    rows: list[list[int]]
    reads: int = 0

    @classmethod
    def for_batch(cls, layout: SharedRow, batch: Sequence[BatchRequest]) -> GuardedRows:
        """One row per request, its written columns holding distinct ids, the rest :data:`UNWRITTEN`."""
        rows = []
        for i, req in enumerate(batch):
            written = layout.written(req.encoder_len, req.decoder_len)
            rows.append([i * layout.width + c if c in written else UNWRITTEN for c in range(layout.width)])
        return cls(layout.width, rows)

    def read(self, row: int, column: int, attention: str) -> int:
        """The id at ``(row, column)``; raises :class:`ReadOutOfRow` first if the column is past the row."""
        if not 0 <= column < self.width:
            raise ReadOutOfRow(row, column, self.width, attention)
        self.reads += 1
        return self.rows[row][column]


def first_read_violation(layout: SharedRow, batch: Sequence[BatchRequest], builder: Builder) -> str | None:
    """The first read the builder makes past a row, or of a column its request never wrote; None if none.

    Every gathered column must lie in the row (nothing masks an index); every
    consumed one must hold an id the request wrote (a masked one may not).
    """
    table = GuardedRows.for_batch(layout, batch)
    for gather in builder(batch):
        for k, column in enumerate(gather.columns):
            try:
                value = table.read(gather.row, column, gather.attention)
            except ReadOutOfRow as err:
                req = batch[gather.row]
                return (f"{err} (request E={req.encoder_len}, d={req.decoder_len}; "
                        f"batch {describe(batch)})")
            if k < gather.consumed and value == UNWRITTEN:
                req = batch[gather.row]
                return (f"{gather.attention}-attention reads row {gather.row} column {column}, which "
                        f"its request (E={req.encoder_len}, d={req.decoder_len}) never wrote "
                        f"(batch {describe(batch)})")
    return None


def describe(batch: Sequence[BatchRequest]) -> str:
    """``[E=6404 d=21, E=0 d=3001]``: a batch in one line."""
    return "[" + ", ".join(f"E={r.encoder_len} d={r.decoder_len}" for r in batch) + "]"


def sglang_fa3_gather(batch: Sequence[BatchRequest]) -> list[Gather]:
    """SGLang 0.5.23's FA3 decode metadata, as columns (``init_forward_metadata``, lines 1239-1265).

    Cross: ``req_to_token[idx, :max_j E_j]``, consumed up to ``encoder_lens[i]``.
    Self: ``encoder_lens[i] + arange(max_j d_j)``, consumed up to ``seq_lens[i]``.
    """
    max_e = max(r.encoder_len for r in batch)
    max_d = max(r.decoder_len for r in batch)
    out = []
    for i, r in enumerate(batch):
        out.append(Gather(i, "cross", range(max_e), r.encoder_len))
        out.append(Gather(i, "self", range(r.encoder_len, r.encoder_len + max_d), r.decoder_len))
    return out


def bounded_gather(batch: Sequence[BatchRequest]) -> list[Gather]:
    """The gather bounded by each request's own lengths: ``[0, E_i)`` and ``E_i + arange(d_i)``."""
    out = []
    for i, r in enumerate(batch):
        out.append(Gather(i, "cross", range(r.encoder_len), r.encoder_len))
        out.append(Gather(i, "self", range(r.encoder_len, r.encoder_len + r.decoder_len), r.decoder_len))
    return out


BUILDERS: dict[str, Builder] = {"sglang-fa3": sglang_fa3_gather, "bounded": bounded_gather}
"""The harness's models of metadata builders, by name (the release's own runs in ``engine/``)."""
