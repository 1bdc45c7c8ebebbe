"""The judges of a start-up batch (profile, warm-up, graph capture): lengths, columns and slots against rows.

An engine builds these batches from its own settings before any request
arrives, and they read the same block tables through the same kernels as
served ones, so the three judges of a served step apply unchanged:

- every length handed to a kernel fits the request's row (``length <= W * kbs * C_g`` tokens);
- every block-table column the kernel reads is inside the row (``cdiv(length, kbs * C_g) <= W``);
- every slot written is the request's own (a dummy row holds no block of its own, so a start-up
  batch may write only ``PAD_SLOT_ID``).

A self-attention group reads a dummy request's ``seq_len``; a cross-attention
group reads the encoder length the runner captures with (``max_encoder_len``).
Pure integers; no engine, no torch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from crossattn_sizing.base.intmath import cdiv

PAD_SLOT_ID = -1


@dataclass(frozen=True)
class Row:
    """One KV-cache group's block-table row as the kernel sees it."""

    kind: str
    """``full``, ``sliding_window``, ``cross`` (``mamba`` rows are not read by attention)."""
    width: int
    """Entries per row (kernel blocks)."""
    kernel_block: int
    dcp: int = 1
    """``C_g``: tokens of one column are ``kernel_block * dcp`` (DCP-sharded groups)."""

    @property
    def tokens(self) -> int:
        """Tokens the row can address."""
        return self.width * self.kernel_block * self.dcp


@dataclass(frozen=True)
class Breach:
    """One judge's violation in one start-up batch."""

    judge: str
    """``length``, ``column`` or ``slot``."""
    purpose: str
    request: int
    group: int
    found: int
    """The length, the last column read, or the slot written."""
    limit: int
    """The row's tokens, its width in columns, or (slots) ``PAD_SLOT_ID``."""

    def line(self) -> str:
        """The breach as one line."""
        who = f"{self.purpose}: request {self.request}"
        if self.judge == "length":
            return f"{who} hands group {self.group} {self.found} tokens; its row holds {self.limit}"
        if self.judge == "column":
            return (f"{who} reads column {self.found} of group {self.group}; its row has {self.limit} "
                    f"(columns 0..{self.limit - 1})")  # fmt: skip
        return (f"{who} writes slot {self.found} of group {self.group}; a dummy row owns no block, "
                "only PAD_SLOT_ID is its own")  # fmt: skip


def read_length(row: Row, seq_len: int, encoder_len: int | None) -> int | None:
    """What the kernel of ``row``'s group reads for one request: its ``seq_len``, or the captured encoder
    length for a cross group (None: a cross group with no encoder length, or a mamba row: nothing read)."""
    if row.kind == "mamba":
        return None
    if row.kind == "cross":
        return encoder_len
    return seq_len


def reads(
    seq_lens: Sequence[int], rows: Sequence[Row], encoder_len: int | None
) -> Iterator[tuple[int, int, Row, int]]:
    """``(request, group, row, length)`` for every positive length a kernel reads through a row."""
    for r, seq_len in enumerate(seq_lens):
        for g, row in enumerate(rows):
            n = read_length(row, seq_len, encoder_len)
            if n is not None and n > 0:
                yield r, g, row, n


def length_breaches(
    purpose: str, seq_lens: Sequence[int], rows: Sequence[Row], encoder_len: int | None
) -> list[Breach]:
    """Every length handed to a kernel that is longer than its request's row holds."""
    return [Breach("length", purpose, r, g, n, row.tokens)
            for r, g, row, n in reads(seq_lens, rows, encoder_len) if n > row.tokens]  # fmt: skip


def column_breaches(
    purpose: str, seq_lens: Sequence[int], rows: Sequence[Row], encoder_len: int | None
) -> list[Breach]:
    """Every last column a kernel reads (``cdiv(length, kbs * C_g) - 1``) that is not inside the row."""
    out = []
    for r, g, row, n in reads(seq_lens, rows, encoder_len):
        last = cdiv(n, row.kernel_block * row.dcp) - 1
        if last >= row.width:
            out.append(Breach("column", purpose, r, g, last, row.width))
    return out


def slot_breaches(
    purpose: str, scheduled: Sequence[int], slots: Sequence[int], group: int = 0
) -> list[Breach]:
    """Every slot a start-up batch writes that is not ``PAD_SLOT_ID`` (a dummy row owns no block)."""
    out = []
    starts = [0]
    for n in scheduled:
        starts.append(starts[-1] + n)
    for r in range(len(scheduled)):
        for t in range(starts[r], min(starts[r + 1], len(slots))):
            if slots[t] != PAD_SLOT_ID:
                out.append(Breach("slot", purpose, r, group, slots[t], PAD_SLOT_ID))
                break
    return out


@dataclass(frozen=True)
class EncoderReservation:
    """What start-up reserves for one request's encoder keys against what one request of the family uses.

    ``captured``: the encoder length the runner warms up and captures with (vLLM V2's ``max_encoder_len``);
    warm-up gives each request ``cdiv(captured, bs)`` cross blocks and capture ``captured`` keys.
    ``profiled``: what the memory profile counts per request (vLLM: ``cdiv(E, bs)`` pages of each cross
    layer). ``largest``: the largest encoder input the scheduler admits that the family really produces.
    """

    family: str
    block_size: int
    captured: int
    profiled: int
    largest: int

    @property
    def short_blocks(self) -> int:
        """Cross blocks per request the warm-up reservation lacks (0 when it covers the largest input)."""
        return max(0, cdiv(self.largest, self.block_size) - cdiv(self.captured, self.block_size))

    @property
    def profile_short_blocks(self) -> int:
        """Cross blocks per request the memory profile lacks (0 when it covers the largest input)."""
        return max(0, cdiv(self.largest, self.block_size) - cdiv(self.profiled, self.block_size))

    def short_bytes(self, page_bytes: int) -> int:
        """The warm-up shortfall in bytes per cross layer, ``page_bytes`` one block of one layer's K and V."""
        return self.short_blocks * page_bytes

    def line(self) -> str:
        """The reservation as one report line."""
        bs, need = self.block_size, cdiv(self.largest, self.block_size)
        profiled = cdiv(self.profiled, bs)
        head = (f"{self.family}: one request uses {self.largest} encoder tokens = {need} cross blocks of "
                f"{bs}; the memory profile counts {profiled} ({self.profiled} tokens)")  # fmt: skip
        if self.short_blocks:
            return (f"{head}; warm-up reserves and capture reads {cdiv(self.captured, bs)} "
                    f"({self.captured} tokens): short by {self.short_blocks} blocks "
                    f"({self.largest - self.captured} keys)")  # fmt: skip
        return f"{head}; warm-up and capture cover it ({self.captured} tokens)"
