"""Strategies for the read-side property: mixed decode batches on SGLang's shared-row layout.

A case is a server (``context_len``, the KV pool's token capacity) and a batch
at one decode step. The batch mixes the two shapes whose combination a
batch-shaped gather gets wrong: requests with a large encoder input (sizes
taken from transformers' own Whisper and Mllama configs, built locally, or any
admissible size) and short prompts, beside text-only requests (no encoder
input) with long decoders. Every request is admitted on its own by SGLang's
rule (:class:`~crossattn_sizing.core.admission_rules.SglangAdmission`, or an
SGLang tree's own, :class:`~crossattn_sizing.core.admission_rules.RowAdmission` answered by its worker,
through :func:`admitted_batches`) and has generated at most what the scheduler
lets it, so whatever goes wrong is the batch's, not an inadmissible request's.
A request may come with a cached prefix (an earlier request computed its
encoder and some prompt tokens; the radix cache hands this one their slots),
which the release's extend must strip differently.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from crossattn_sizing.core.admission_rules import EngineRequest, RowAdmission, SglangAdmission, admitted
from crossattn_sizing.core.known_configs import LLAMA_32_VISION
from crossattn_sizing.core.layouts import SharedRow
from crossattn_sizing.core.read_gather import BatchRequest

MAX_CONTEXT = 16384
"""Rows stay short enough for the guarded table's per-column lists (a few ms per example)."""


@functools.cache
def model_encoder_sizes() -> tuple[int, ...]:
    """Encoder tokens per request of real models, from transformers' config classes (no download).

    Whisper: ``max_source_positions`` frames (1500). Mllama: ``media * tiles *
    ((image_size // patch_size)^2 + 1)`` for one image of 1 to ``max_num_tiles`` tiles, with
    transformers' defaults (448 px: 4 tiles 4100) and Llama-3.2-Vision's 560 px (4 tiles: 6404).
    """
    import transformers

    whisper = transformers.WhisperConfig().max_source_positions
    sizes = [whisper]
    visions: tuple[Any, ...] = (
        transformers.MllamaVisionConfig(),
        transformers.MllamaVisionConfig(**LLAMA_32_VISION),  # type: ignore[arg-type]
    )
    for vision in visions:
        per_tile = (vision.image_size // vision.patch_size) ** 2 + 1
        sizes += [tiles * per_tile for tiles in range(1, vision.max_num_tiles + 1)]
    return tuple(sorted(set(sizes)))


@dataclass(frozen=True)
class ReadCase:
    """A server and one decode step of a batch, every request admitted alone."""

    layout: SharedRow
    rule: RowAdmission
    requests: tuple[EngineRequest, ...]
    batch: tuple[BatchRequest, ...]
    cached: tuple[int, ...] = ()
    """Each request's cached prefix (input tokens a cached prefix holds; empty: none has one)."""

    def prefix(self, i: int) -> int:
        """Request ``i``'s cached prefix (0: none)."""
        return self.cached[i] if self.cached else 0

    def lines(self) -> list[str]:
        """The case, for a failure's diagnosis."""
        width = getattr(self.rule, "row_width", None) or self.layout.width  # a tree's own row, where known
        out = [f"  context_len {self.layout.context_len} (row width {width}), "
               f"kv_capacity {self.rule.kv_capacity}, max_req_input_len {self.rule.max_req_input_len}"]
        for i, (req, step) in enumerate(zip(self.requests, self.batch, strict=True)):
            out.append(f"  request {i}: encoder {req.encoder_len}, prompt {req.prompt_len}, "
                       f"max_new {req.max_new}; at this step d = {step.decoder_len}"
                       + (f"; cached prefix {self.prefix(i)}" if self.prefix(i) else ""))
        return out


@st.composite
def _request(draw: st.DrawFn, rule: RowAdmission,
             with_encoder: bool) -> tuple[EngineRequest, BatchRequest, int]:
    limit = rule.input_draw_limit  # the model: input_len < max_req_input_len; a tree: its own check decides
    if with_encoder:
        sizes = [e for e in model_encoder_sizes() if e < limit]
        choices = st.sampled_from(sizes) | st.integers(1, limit - 1) if sizes else st.integers(1, limit - 1)
        encoder = draw(choices, label="encoder_len")
        prompt = draw(st.integers(1, limit - encoder), label="prompt_len")
    else:
        encoder = 0
        prompt = draw(st.integers(1, limit), label="prompt_len")
    request = EngineRequest(encoder, prompt, draw(st.integers(0, rule.context_len), label="max_new"))
    assume(admitted(rule, request) and rule.output_cap(request) >= 1)
    generated = draw(st.integers(1, rule.output_cap(request)), label="generated")
    cached = 0
    if draw(st.booleans(), label="prefix cached"):  # the encoder whole, and up to all but one prompt token
        cached = encoder + draw(st.integers(0, prompt - 1), label="cached prompt tokens")
    return request, BatchRequest(encoder, prompt + generated), cached


@st.composite
def mixed_batches(draw: st.DrawFn) -> ReadCase:
    """A server and a decode batch with at least one encoder request and one text-only request."""
    context = draw(st.integers(64, MAX_CONTEXT), label="context_len")
    kv_capacity = draw(st.integers(context // 2, 4 * context), label="kv_capacity")
    rule = SglangAdmission(context, kv_capacity)
    assume(rule.max_req_input_len >= 3)
    return draw(admitted_batches(rule, SharedRow(context)))


@st.composite
def admitted_batches(draw: st.DrawFn, rule: RowAdmission, layout: SharedRow) -> ReadCase:
    """A decode batch for one server, each request admitted by ``rule`` (the harness's model, or a tree's
    own): 1 to 3 requests with an encoder input and 1 to 3 text-only ones, in any order."""
    assume(rule.input_draw_limit >= 2)
    n_encoder = draw(st.integers(1, 3), label="encoder_requests")
    n_text = draw(st.integers(1, 3), label="text_requests")
    drawn = [draw(_request(rule, True)) for _ in range(n_encoder)]
    drawn += [draw(_request(rule, False)) for _ in range(n_text)]
    order = draw(st.permutations(range(len(drawn))), label="order")
    requests = tuple(drawn[i][0] for i in order)
    batch = tuple(drawn[i][1] for i in order)
    return ReadCase(layout, rule, requests, batch, tuple(drawn[i][2] for i in order))
