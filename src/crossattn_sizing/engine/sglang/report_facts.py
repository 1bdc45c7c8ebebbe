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
    PNG_HELPER,
    SPEC,
    CodeSite,
    Excerpt,
    ReportFacts,
    Served,
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


def summary(name: str, release: str) -> str:
    """The read side's first paragraph, in an SGLang maintainer's words."""
    if name != READ_SIDE:
        return ""
    return (
        f"On SGLang {release or '(this tree)'}, the FlashAttention 3 backend (`--attention-backend fa3`, "
        "the default on Hopper GPUs for the encoder-decoder models Mllama / Llama 3.2 Vision and MossVL) "
        "builds a decode batch's "
        "self-attention page table by reading each request's text slots from its own `req_to_token` row at "
        "its own offset `encoder_lens[i]`, but for the batch's longest text length `max_j seq_lens[j]`. "
        "The read passes the end of a row whenever, in one decode batch, "
        "**max_i encoder_lens[i] + max_j seq_lens[j] > context_length + 4** (the row width), e.g. an image "
        "request decoding beside a long text-only request. The eager path and the CUDA-graph replay path "
        "both do it: on a GPU a device-side assert in the gather, which takes the server down, although "
        'every request was admitted and fits its own row. Since 0.5.13: PR #25045 ("Fix FA3 '
        'cross-attention batched-decode for per-request varlen encoder") replaced the one-encoder-length '
        "assert with this per-request gather."
    )


def expected(name: str) -> str:
    """What the metadata should hold."""
    if name != READ_SIDE:
        return ""
    return (
        "Each request's page table holds its own text slots, columns `encoder_lens[i]` to "
        "`encoder_lens[i] + seq_lens[i] - 1` of its row (the kernel reads `seq_lens[i]` of them), and the "
        "batch decodes."
    )


def repro_script(argv: Sequence[str], root: Path, release: str) -> str | None:
    """The read side's standalone script (:mod:`crossattn_sizing.engine.sglang.repro`)."""
    from crossattn_sizing.engine.sglang import repro

    return repro.script(argv, root, release)


def sites(root: Path) -> list[tuple[Excerpt, str, tuple[int, ...]]]:
    """Every line of the read side: the batch-wide max and the gather, eager and replay."""
    from crossattn_sizing.engine.sglang import repro

    return repro.causing(root)


TILE_IMAGE = {1: (560, 560), 2: (1120, 560), 3: (1680, 560), 4: (1120, 1120)}
"""An image size Mllama's processor cuts into that many 560x560 tiles (its aspect-ratio canvases)."""
MODEL = "meta-llama/Llama-3.2-11B-Vision-Instruct"


def _served_batch(argv: Sequence[str]) -> tuple[Sequence[str], str]:
    """The case a server can take: the argv's own when every request is text or whole Mllama tiles, else
    the deployed mixed batch (with why)."""
    ok = all(e == 0 or (e % MLLAMA_TILE_TOKENS == 0 and e // MLLAMA_TILE_TOKENS in TILE_IMAGE)
             for e, _, _ in _batch(argv))  # fmt: skip
    if ok:
        return argv, ""
    case = deployed(READ_SIDE) or []
    return case, (
        "The smallest case's image-token counts are not an Mllama image's (a whole number of "
        f"{MLLAMA_TILE_TOKENS}-token tiles), so the server is driven with the mixed batch instead."
    )


def served(argv: Sequence[str]) -> Served | None:
    """The read side's batch on an SGLang server with Mllama and FA3, sent at once."""
    if not argv:
        return None
    case, note = _served_batch(argv)
    context, capacity = option_value(case, "--context-len"), option_value(case, "--kv-capacity")
    launch = (f"python3 -m sglang.launch_server --model-path {MODEL} --context-length {context} "
              f"--max-total-tokens {capacity} --attention-backend fa3 --mem-fraction-static 0.8 "
              "--port 30000")  # fmt: skip
    reqs = [(e // MLLAMA_TILE_TOKENS, p, max(d - p, 1)) for e, p, d in _batch(case)]
    client = "\n".join([
        '"""Send the batch at once, so the scheduler decodes the requests together (stdlib only)."""',
        "import base64, json, struct, threading, urllib.request, zlib",
        "",
        "",
        *PNG_HELPER,
        "",
        "",
        f"REQUESTS = {reqs}  # (image tiles, prompt tokens, new tokens) per request",
        f"SIZES = {TILE_IMAGE}  # tiles -> an image size Mllama cuts into that many tiles",
        "",
        "",
        "def send(tiles, prompt, new):",
        "    body = {'text': ('<|image|>' if tiles else '') + 'hello ' * (prompt - 1),",
        "            'sampling_params': {'max_new_tokens': new, 'ignore_eos': True, 'temperature': 0}}",
        "    if tiles:",
        "        image = base64.b64encode(png(*SIZES[tiles])).decode()",
        "        body['image_data'] = 'data:image/png;base64,' + image",
        "    req = urllib.request.Request('http://127.0.0.1:30000/generate', json.dumps(body).encode(),",
        "                                 {'Content-Type': 'application/json'})",
        "    print(urllib.request.urlopen(req, timeout=600).read()[:200])",
        "",
        "",
        "threads = [threading.Thread(target=send, args=r) for r in REQUESTS]",
        "for t in threads:",
        "    t.start()",
        "for t in threads:",
        "    t.join()",
    ])  # fmt: skip
    gpu = ("one Hopper GPU (H100 or H200; FA3 is SGLang's default backend there; the 11B model in bf16 takes "
           "about 22 GB)")  # fmt: skip
    return Served(gpu, launch, client + "\n", note)


def refuses(release: str) -> str:
    """Releases before the per-request gather refuse a batch of several encoder-decoder requests."""
    from crossattn_sizing.engine.sglang.releases import FIRST_OVERFLOW

    key = [int(x) for x in release.split(".post")[0].split(".")]
    if key < [int(x) for x in FIRST_OVERFLOW.split(".")]:
        return ("refuses such a batch: the decode path asserts `encoder_lens.numel() == 1` (\"Only encoder "
                "size 1 is supported for now\")")  # fmt: skip
    return ""


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
    summary=summary,
    expected=expected,
    sites=sites,
    repro=repro_script,
    served=served,
    refuses=refuses,
)
