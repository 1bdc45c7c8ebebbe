"""Strategies for the read-side property: mixed decode batches on SGLang's shared-row layout.

A case is a server (``context_len``, the KV pool's token capacity) and a batch
at one decode step. The batch mixes the two shapes whose combination a
batch-shaped gather gets wrong: requests with a large encoder input and short
prompts, beside text-only requests (no encoder input) with long decoders.

:func:`mixed_batches` draws only what a server can be driven into (docs/spec.md
§12): each image request's encoder tokens are one Mllama image of a whole
number of tiles (:func:`~crossattn_sizing.models.served_inputs.mllama_images`:
Llama-3.2-Vision's vision config, built locally with transformers'
``MllamaVisionConfig``: 1601 tokens a tile, 1 to 4 tiles); each
request is admitted on its own by SGLang's rule
(:class:`~crossattn_sizing.core.admission_rules.SglangAdmission`, or an SGLang
tree's own, a :class:`~crossattn_sizing.core.admission_rules.RowAdmission` answered by its worker) and
has generated at most what the scheduler lets it; and the batch as a whole is
one the scheduler decodes together
(:class:`~crossattn_sizing.core.served.BatchAdmission`: every slot its
requests hold within the pool). The draws stay inside that domain by
construction and by ``assume``, so Hypothesis's shrinking does too: the
minimal case is one a server can be driven into. (Whisper is the other
encoder-decoder model SGLang serves, but SGLang forces it onto flashinfer: no
Whisper batch reaches the FA3 builder this property judges.)

:func:`unserved_batches` draws the rest: any encoder length below the input
limit, each request admitted alone, strictly outside the served domain. A
violation found only there is "latent: no served request reaches it".

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
from crossattn_sizing.core.served import BatchAdmission, served_refusal
from crossattn_sizing.models.served_inputs import mllama_images

MAX_CONTEXT = 16384
"""Rows stay short enough for the guarded table's per-column lists (a few ms per example)."""


@functools.cache
def model_encoder_sizes() -> tuple[int, ...]:
    """Encoder tokens per request of real models, from transformers' config classes (no download), for
    the wide domain: Whisper's ``max_source_positions`` (1500) and Mllama's whole tiles with transformers'
    defaults (448 px) and Llama-3.2-Vision's 560 px, offered beside any other length."""
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

    def triples(self) -> list[tuple[int, ...]]:
        """``(E, prompt, d)`` per request, ``(E, prompt, d, cached)`` for one with a cached prefix."""
        return [
            (r.encoder_len, r.prompt_len, b.decoder_len, *((self.prefix(i),) if self.prefix(i) else ()))
            for i, (r, b) in enumerate(zip(self.requests, self.batch, strict=True))
        ]

    def served_refusal(self) -> str | None:
        """Why no server decodes this batch (Mllama's whole tiles, the pool held at once), or None."""
        return served_refusal(mllama_images(), BatchAdmission(self.rule.kv_capacity), self.triples())

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
def _request(draw: st.DrawFn, rule: RowAdmission, encoders: tuple[int, ...] | None,
             pool_left: int) -> tuple[EngineRequest, BatchRequest, int]:
    """One admitted request holding at most ``pool_left`` slots at this step. ``encoders``: the served
    model's lengths (an image request); ``()``: any length below the input limit (the wide domain);
    None: text-only."""
    limit = rule.input_draw_limit  # the model: input_len < max_req_input_len; a tree: its own check decides
    if encoders:
        sizes = [e for e in encoders if e < min(limit, pool_left - 1)]
        assume(sizes)
        encoder = draw(st.sampled_from(sizes), label="encoder_len")
    elif encoders is not None:
        sizes = [e for e in model_encoder_sizes() if e < limit]
        choices = st.sampled_from(sizes) | st.integers(1, limit - 1) if sizes else st.integers(1, limit - 1)
        encoder = draw(choices, label="encoder_len")
    else:
        encoder = 0
    room = min(limit - encoder, pool_left - encoder - 1)  # a prompt and one generated token fit the pool
    assume(room >= 1)
    prompt = draw(st.integers(1, room), label="prompt_len")
    request = EngineRequest(encoder, prompt, draw(st.integers(0, rule.context_len), label="max_new"))
    assume(admitted(rule, request) and rule.output_cap(request) >= 1)
    most = min(rule.output_cap(request), pool_left - encoder - prompt)
    generated = draw(st.integers(1, most), label="generated")
    cached = 0
    if draw(st.booleans(), label="prefix cached"):  # the encoder whole, and up to all but one prompt token
        cached = encoder + draw(st.integers(0, prompt - 1), label="cached prompt tokens")
    return request, BatchRequest(encoder, prompt + generated), cached


def _server(draw: st.DrawFn, lowest: int) -> SglangAdmission:
    """A server: ``context_len`` from ``lowest`` to :data:`MAX_CONTEXT`, a pool of half to four times it."""
    context = draw(st.integers(lowest, MAX_CONTEXT), label="context_len")
    kv_capacity = draw(st.integers(context // 2, 4 * context), label="kv_capacity")
    rule = SglangAdmission(context, kv_capacity)
    assume(rule.max_req_input_len >= 3)
    return rule


@st.composite
def mixed_batches(draw: st.DrawFn) -> ReadCase:
    """A server and a decode batch a server can be driven into, with at least one Mllama image request
    and one text-only request (the served domain: the module docstring)."""
    # The smallest server an image request reaches: its input (one tile and a prompt token) below
    # max_req_input_len = context_len - 6.
    rule = _server(draw, mllama_images().lengths[0] + 8)
    return draw(admitted_batches(rule, SharedRow(rule.context_len)))


@st.composite
def unserved_batches(draw: st.DrawFn) -> ReadCase:
    """A server and a decode batch no server is driven into (any encoder length, each request admitted
    alone, the pool not judged): where a violation is only latent."""
    rule = _server(draw, 64)
    return draw(admitted_batches(rule, SharedRow(rule.context_len), served=False))


@st.composite
def admitted_batches(draw: st.DrawFn, rule: RowAdmission, layout: SharedRow,
                     served: bool = True) -> ReadCase:  # fmt: skip
    """A decode batch for one server, each request admitted by ``rule`` (the harness's model, or a tree's
    own): 1 to 3 requests with an encoder input and 1 to 3 text-only ones, in any order. ``served``: the
    batch is one a server decodes (Mllama's whole tiles, the pool held at once); else strictly not."""
    assume(rule.input_draw_limit >= 2)
    encoders = mllama_images().lengths if served else ()
    pool_left = rule.kv_capacity if served else 1 << 62
    n_encoder = draw(st.integers(1, 3), label="encoder_requests")
    n_text = draw(st.integers(1, 3), label="text_requests")
    drawn = []
    for kind in [encoders] * n_encoder + [None] * n_text:
        one = draw(_request(rule, kind, pool_left))
        drawn.append(one)
        pool_left -= one[1].encoder_len + one[1].decoder_len
    order = draw(st.permutations(range(len(drawn))), label="order")
    requests = tuple(drawn[i][0] for i in order)
    batch = tuple(drawn[i][1] for i in order)
    case = ReadCase(layout, rule, requests, batch, tuple(drawn[i][2] for i in order))
    assume((case.served_refusal() is None) == served)  # the judge decides, whatever the draws did
    return case
