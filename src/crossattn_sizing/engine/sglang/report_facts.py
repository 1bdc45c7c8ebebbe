"""SGLang's facts for ``report`` (see :mod:`crossattn_sizing.engine.report_facts`).

The read side's observation is a guarded read of ``req_to_token``: the worker
records the innermost frame of the release's own source that indexed
(:func:`crossattn_sizing.engine.adapter.engine_frame`), so the file and
line quoted are the release's, whatever release it is. Users state a case as
the server's ``--context-length``, the KV pool's ``--max-total-tokens``, the
attention backend and the requests: image (encoder) tokens, prompt and output
length (docs/spec.md §10: the row is ``[E encoder | d decoder]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from crossattn_sizing.core.known_configs import LLAMA_32_VISION
from crossattn_sizing.engine.report_facts import (
    SPEC,
    CodeSite,
    ReportFacts,
    StepFacts,
    option_value,
    quote_lines,
)
from crossattn_sizing.engine.sglang.releases import AUDIT_RELEASES

READ_SIDE = "test_read_coverage::test_gathers_stay_in_row_and_own_columns"
WRITE_SIDE = "test_read_coverage::test_admitted_requests_fit_their_shared_row"
MLLAMA_TILE_TOKENS = (LLAMA_32_VISION["image_size"] // LLAMA_32_VISION["patch_size"]) ** 2 + 1
"""Llama-3.2-Vision's encoder tokens per tile: (560 // 14) ** 2 + 1 = 1601 (a 4-tile image: 6404)."""
MIXED_BATCH = (
    8192,
    8192 * 4,
    [(LLAMA_32_VISION["max_num_tiles"] * MLLAMA_TILE_TOKENS, 20, 21), (0, 3000, 3001)],
)
"""``reproduce mllama-mixed-batch``'s case: context 8192, one 4-tile image and 20 text tokens beside a
3000-token text request, at their first decode step (commands/sglang_check.py)."""

STEPS = {
    READ_SIDE: StepFacts(
        title="FA3 decode metadata reads past a req_to_token row on mixed encoder-decoder batches",
        step="FlashAttentionBackend's decode metadata (init_forward_metadata, and the CUDA-graph replay): "
        "the self-attention page table gathers req_to_token[row_i, encoder_lens[i] + arange(max_j d_j)], a "
        "per-request offset with the batch's longest decoder length",
        gpu="a device-side assert (index out of bounds in the req_to_token gather), which takes the server "
        "down; every request of the batch is admitted and fits its own row",
    ),
    WRITE_SIDE: StepFacts(
        title="An admitted encoder-decoder request needs more of its req_to_token row than it has",
        step="the scheduler's admission (TpModelWorker.get_worker_info's max_req_len and max_req_input_len, "
        "validate_input_length, init_req_max_new_tokens) against the row (context_len + "
        "get_req_to_token_extra_context_len, ReqToTokenPool)",
        gpu="decode writes past the row: silent garbage in another request's KV slots, or an illegal memory "
        "access at the end of the pool",
    ),
}


def steps(name: str) -> StepFacts:
    """The step facts of a property; a property not listed here is named as the harness names it."""
    return STEPS.get(
        name,
        StepFacts(
            title=f"SGLang encoder-decoder batches violate the harness property {name}",
            step=name,
            gpu="not known for this property: see the diagnosis",
        ),
    )


def _batch(argv: Sequence[str]) -> list[tuple[int, int, int]]:
    text = option_value(argv, "--requests") or ""
    return [tuple(int(x) for x in r.split(":")) for r in text.split(",") if r]  # type: ignore[misc]


def _encoder(e: int) -> str:
    if e == 0:
        return "no image (text only)"
    tiles, rest = divmod(e, MLLAMA_TILE_TOKENS)
    if rest == 0 and tiles:
        return f"{e} image tokens (one {tiles}-tile image, Mllama: {tiles} x {MLLAMA_TILE_TOKENS})"
    return f"{e} image (encoder) tokens"


def minimal_case(argv: Sequence[str]) -> list[str]:
    """The case as an SGLang user states it: the model, the server options, the requests at one decode."""
    context = option_value(argv, "--context-len")
    capacity = option_value(argv, "--kv-capacity")
    lines = [
        "- model: an encoder-decoder vision model served with the FA3 backend, e.g. Mllama "
        "(Llama 3.2 Vision), whose `req_to_token` row holds `[image tokens | text tokens]`",
        f"- server: `--context-length {context}` (row width {int(context or 0) + 4}), "
        f"`--max-total-tokens {capacity}`, `--attention-backend fa3`",
        "- requests, decoded in one batch:",
    ]
    for i, (e, p, d) in enumerate(_batch(argv)):
        lines.append(
            f"  - request {i}: {_encoder(e)}, a {p}-token text prompt, {d - p} generated "
            f"({d} text tokens in its row)"
        )
    return lines


def deployed(name: str) -> list[str] | None:
    """The read side's case as deployed: the Mllama mixed batch at context 8192."""
    if name != READ_SIDE:
        return None
    context, capacity, batch = MIXED_BATCH
    requests = ",".join(f"{e}:{p}:{d}" for e, p, d in batch)
    return ["check", "--engine", SPEC, "--context-len", str(context), "--kv-capacity", str(capacity),
            "--requests", requests]  # fmt: skip


def site(name: str, root: Path, spec: str, argv: Sequence[str]) -> CodeSite | None:
    """The release's line that indexed past the row: the frame the worker recorded on replaying the case."""
    if name != READ_SIDE:
        return None
    from crossattn_sizing.engine.sglang.client import SglangReads

    context = int(option_value(argv, "--context-len") or 0)
    for verdict in SglangReads(spec).verdicts(context, _batch(argv)).values():
        where = str(verdict.get("where") or "")
        if verdict.get("verdict") == "fails" and ":" in where:
            file, _, line = where.rpartition(":")
            return CodeSite(
                file,
                int(line),
                "the release's frame that indexed, seen by a guarded read",
                quote_lines(root, file, int(line), before=6, after=1),
            )
    return None


FACTS = ReportFacts(
    engine="sglang",
    tracker="SGLang",
    steps=steps,
    minimal_case=minimal_case,
    site=site,
    releases=AUDIT_RELEASES,  # the audit's releases: the first with the overflow is named, not skipped
    release_source="check",
    spec_option="--engine",
    deployed=deployed,
)
