"""``check --engine sglang==X`` and ``reproduce mllama-mixed-batch --engine sglang==X``: one decode batch
through an SGLang tree's own metadata builder, judged on the read side.

A batch is ``e:prompt:d`` per request (encoder tokens, prompt tokens, decoder
tokens at this decode step). Each request must be admitted alone by SGLang's
rule for the server (``--context-len``, ``--kv-capacity``) and have generated
no more than the scheduler lets it (else it is bad input, exit 2: the engine
would never build metadata for it). The release's ``FlashAttentionBackend``
builds the decode metadata on the eager path and on CUDA-graph replay, over a
guarded ``req_to_token``; exit 0 when both hold, 1 when one reads past a row
(row, column and width printed), 3 when a stand-in is missing (not run).
"""

from __future__ import annotations

from typing import Any

from crossattn_sizing.base.errors import ConfigError, ReleaseUnavailable
from crossattn_sizing.base.limits import MAX_INT_DIGITS, too_long
from crossattn_sizing.base.outcome import EXIT_FAILS, Outcome, exit_status
from crossattn_sizing.core.admission_rules import EngineRequest, SglangAdmission
from crossattn_sizing.core.known_configs import LLAMA_32_VISION
from crossattn_sizing.engine.client import EngineCrash
from crossattn_sizing.engine.sglang.source import check_line

Triple = tuple[int, int, int]


def int_option(option: str, text: str, minimum: int) -> int:
    """An integer option of at least ``minimum``; anything else is the option's error."""
    if too_long(text):
        raise ConfigError(option, text, f"integers may have at most {MAX_INT_DIGITS} digits")
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(option, text, "must be an integer") from None
    if value < minimum:
        raise ConfigError(option, value, f"must be at least {minimum}")
    return value


def parse_requests(text: str, rule: SglangAdmission) -> list[Triple]:
    """``e:prompt:d,...``, each admitted alone and within what the scheduler lets it generate."""
    out = []
    for part in text.split(","):
        fields = part.split(":")
        if len(fields) != 3:
            raise ConfigError(
                "--requests", part, "each request is e:prompt:d (encoder, prompt, decoder tokens)"
            )
        e, p, d = (int_option("--requests", f, 0) for f in fields)
        request = EngineRequest(e, p, d - p)
        refused = rule.refusal(request)
        if refused is not None:
            raise ConfigError("--requests", part, f"not admitted by SGLang: {refused}")
        if not p < d <= p + rule.output_cap(request):
            raise ConfigError(
                "--requests",
                part,
                f"d must be prompt + 1 .. prompt + "
                f"{rule.output_cap(request)} (max_req_len - input - 1 tokens generated)",
            )
        out.append((e, p, d))
    return out


def run_check(spec: str, context_text: str | int, kv_text: str | int, requests_text: str) -> int:
    """Judge one batch under ``spec``'s own builder; the exit status (0 holds, 1 fails, 3 not run)."""
    from crossattn_sizing.engine.sglang.client import SglangReads, sglang_worker

    context_len = int_option("--context-len", str(context_text), 8)
    kv_capacity = int_option("--kv-capacity", str(kv_text), 8)
    rule = SglangAdmission(context_len, kv_capacity)
    batch = parse_requests(requests_text, rule)
    worker = sglang_worker(spec)
    note = getattr(worker.release, "note", "")
    if note:
        print(f"note: {note}")
    print(f"engine:    {spec} FlashAttentionBackend decode metadata (the release's own code; docs/engine.md)")
    if worker.ready.get("range"):
        print(f"release:   {worker.ready['range']}")
    try:
        width: Any = worker.request("width", context_len=context_len)
    except EngineCrash as exc:  # the tree's own sizing hung or ended its process: that batch fails
        print(f"FAIL  width: the tree's row sizing did not return: {exc}")
        print(f"  reproduce: {check_line(spec, context_len, kv_capacity, batch)}")
        return EXIT_FAILS
    except ReleaseUnavailable as exc:
        print(f"NOT RUN width: {exc}")
        return exit_status([Outcome.NOT_RUN])
    print(
        f"server:    context_len {context_len}, kv_capacity {kv_capacity}; req_to_token row width {width} "
        f"(the release's sizing); max_req_input_len {rule.max_req_input_len}"
    )
    for i, (e, p, d) in enumerate(batch):
        print(
            f"request {i}: encoder {e}, prompt {p}, decoder tokens at this step {d} (columns 0..{e + d - 1})"
        )
    outcomes: list[Outcome] = []
    reads = SglangReads(spec)
    written = reads.write(context_len, batch)
    if written["verdict"] == "fails":
        print(f"FAIL  write: {written['message']}")
        print(f"  reproduce: {check_line(spec, context_len, kv_capacity, batch)}")
        return EXIT_FAILS
    if written["verdict"] == "not run":
        print(f"NOT RUN write: {written['reason']}")
        return exit_status([Outcome.NOT_RUN])
    print(f"OK    write: every token the batch writes lands in its row (width {written['width']})")
    for path, verdict in reads.verdicts(context_len, batch).items():
        if verdict["verdict"] == "holds":
            print(
                f"OK    {path}: every column gathered lies in its row; the kernel reads only its own"
            )
            outcomes.append(Outcome.HOLDS)
        elif verdict["verdict"] == "fails":
            print(f"FAIL  {path}: {verdict['message']}")
            outcomes.append(Outcome.FAILS)
        else:
            print(f"NOT RUN {path}: {verdict['reason']}")
            outcomes.append(Outcome.NOT_RUN)
    status = exit_status(outcomes)
    if status == EXIT_FAILS:
        print(f"  reproduce: {check_line(spec, context_len, kv_capacity, batch)}")
    return status


def mllama_mixed_batch() -> tuple[int, int, list[Triple], str]:
    """Issue 28's batch: Mllama with one 4-tile image and 20 text tokens beside a 3000-token text request,
    at context 8192, at its first decode step; E from a transformers MllamaVisionConfig built locally."""
    import transformers

    vision: Any = transformers.MllamaVisionConfig(**LLAMA_32_VISION)  # type: ignore[arg-type]
    tiles = vision.max_num_tiles
    e = tiles * ((vision.image_size // vision.patch_size) ** 2 + 1)
    why = (
        f"Llama-3.2-Vision (image_size {vision.image_size}, patch_size {vision.patch_size}): 1 image x "
        f"{tiles} tiles x ((image_size // patch_size)^2 + 1) = {e} encoder tokens and 20 text tokens, "
        "beside a text-only request of 3000 tokens; context_len 8192"
    )
    return 8192, 8192 * 4, [(e, 20, 21), (0, 3000, 3001)], why
