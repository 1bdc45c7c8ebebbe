"""What a served request can be, and whether a server holds a whole batch at once (docs/spec.md §12).

A property that draws a request no server can be driven into, or a batch no
scheduler runs together, finds counterexamples nobody can file: an Mllama
request of 11 encoder tokens, two requests that need 346 KV slots of a pool
that holds 339. So the strategies draw inside a *served domain*, and this
module says what that domain is, as values the strategies, the properties and
their meta-tests share (pure Python: the figures come in from transformers'
configs, read by the strategies, or from docs/spec.md):

- :class:`EncoderLengths`: the encoder lengths one model family's own
  preprocessing gives a request (Mllama: whole tiles; Whisper: its fixed
  frames; Nemotron-Parse: its page sizes; BART, T5, mBART: up to their
  positions), and whether a request without encoder input reaches the model;
- :class:`BatchAdmission`: the scheduler's whole-batch conditions at a decode
  step (every slot the running requests hold at once within the pool, the
  running-request limit, an encoder part no prefill chunk splits), judged
  for the batch as a whole, beside each request's own admission;
- :func:`served_refusal`: the first reason a drawn batch is outside the
  domain, or None: what a violation found outside it is reported with
  ("latent: no served request reaches it").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crossattn_sizing.core.known_configs import (
    BART_POSITIONS,
    NEMOTRON_NARROW_PAGE_TOKENS,
    NEMOTRON_PAGE_TOKENS,
    WHISPER_FRAMES,
)

LATENT = "latent: no served request reaches it"
"""How a violation found only outside the served domain is reported: never "fails", never filed upstream."""


@dataclass(frozen=True)
class EncoderLengths:
    """The encoder lengths one model family's preprocessing gives a request, and where they come from."""

    model: str
    lengths: tuple[int, ...]
    """Every length a request with encoder input can have, ascending (each >= 1)."""
    text_only: bool
    """Whether a request with no encoder input reaches the model (an Mllama prompt without an image does;
    every Whisper request carries its audio)."""
    source: str
    """Why these lengths: the config fields and the preprocessing rule they come from."""

    def __post_init__(self) -> None:
        if not self.lengths or min(self.lengths) < 1 or list(self.lengths) != sorted(set(self.lengths)):
            raise ValueError(f"{self.model}: encoder lengths must be ascending, distinct and >= 1")

    def refusal(self, encoder_len: int) -> str | None:
        """Why a request of ``encoder_len`` encoder tokens is not one this model's preprocessing gives."""
        if encoder_len == 0:
            return None if self.text_only else f"every {self.model} request has encoder input"
        if encoder_len in self.lengths:
            return None
        return f"{self.model} gives no request {encoder_len} encoder tokens ({self.source})"


def mllama(per_tile: int, max_tiles: int, model: str = "Mllama") -> EncoderLengths:
    """One image of 1 to ``max_tiles`` tiles, ``per_tile`` tokens each (a patch grid and its class token:
    ``(image_size // patch_size) ** 2 + 1``); a prompt without an image is text-only."""
    if per_tile < 1 or max_tiles < 1:
        raise ValueError("per_tile and max_tiles must be >= 1")
    return EncoderLengths(model, tuple(per_tile * t for t in range(1, max_tiles + 1)), True,
                          f"one image of 1 to {max_tiles} tiles of {per_tile} tokens")


def whisper(frames: int = WHISPER_FRAMES) -> EncoderLengths:
    """Every request's audio padded to 30 s: ``frames`` encoder frames, always."""
    return EncoderLengths("Whisper", (frames,), False, f"audio padded to 30 s: always {frames} frames")


def nemotron_parse(
    pages: Sequence[int] = (NEMOTRON_NARROW_PAGE_TOKENS, NEMOTRON_PAGE_TOKENS),
) -> EncoderLengths:
    """One page image per request, its tokens fixed by the page's size (docs/spec.md §6)."""
    return EncoderLengths("Nemotron-Parse", tuple(sorted(set(pages))), False,
                          "one page image per request, tokens by page size")


def positional(model: str, max_positions: int = BART_POSITIONS) -> EncoderLengths:
    """A text encoder (BART, mBART, T5): any source of 1 to ``max_positions`` tokens."""
    return EncoderLengths(model, tuple(range(1, max_positions + 1)), False,
                          f"a source of 1 to {max_positions} tokens")


def held_slots(request: Sequence[int]) -> int:
    """KV slots a request ``(E, prompt, d, ...)`` holds at a decode step: its encoder and its ``d`` decoder
    tokens (``d`` counts the token decoded now, whose slot this step allocates)."""
    return int(request[0]) + int(request[2])


@dataclass(frozen=True)
class BatchAdmission:
    """A server's whole-batch conditions at one decode step (docs/spec.md §12), judged all at once.

    ``kv_capacity`` is the token pool (``--max-total-tokens``): every slot of
    every running request comes out of it, so a batch whose requests hold
    more at once is retracted, never decoded. ``max_running_requests`` is the
    running-request limit (None: the server's default, above any batch drawn
    here). ``chunked_prefill_size`` (None: off, as ``-1`` sets it) is the
    prefill chunk: an encoder part is extended whole, never split across
    chunks, so a request whose encoder exceeds the chunk is not served.
    """

    kv_capacity: int
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None

    def refusal(self, batch: Sequence[Sequence[int]]) -> str | None:
        """Why the scheduler never decodes ``batch`` (``(E, prompt, d[, cached])`` per request) together,
        or None when it does."""
        if self.max_running_requests is not None and len(batch) > self.max_running_requests:
            return f"{len(batch)} running requests > max_running_requests {self.max_running_requests}"
        if self.chunked_prefill_size is not None:
            for i, r in enumerate(batch):
                if int(r[0]) > self.chunked_prefill_size:
                    return (f"request {i}'s {int(r[0])} encoder tokens exceed the prefill chunk "
                            f"{self.chunked_prefill_size} (an encoder part is never split)")
        held = sum(held_slots(r) for r in batch)
        if held > self.kv_capacity:
            parts = " + ".join(str(held_slots(r)) for r in batch)
            return f"the batch holds {parts} = {held} KV slots at once; the pool holds {self.kv_capacity}"
        return None


def served_refusal(model: EncoderLengths, admission: BatchAdmission,
                   batch: Sequence[Sequence[int]]) -> str | None:  # fmt: skip
    """The first reason ``batch`` is outside the served domain of ``model`` on this server, or None.

    Each request's own admission (its row, its input limit) is the engine's
    rule, judged where the request is drawn; this adds what the model's
    preprocessing and the whole batch decide.
    """
    for i, r in enumerate(batch):
        why = model.refusal(int(r[0]))
        if why is not None:
            return f"request {i}: {why}"
    return admission.refusal(batch)


__all__ = [
    "LATENT",
    "BatchAdmission",
    "EncoderLengths",
    "held_slots",
    "mllama",
    "nemotron_parse",
    "positional",
    "served_refusal",
    "whisper",
]
