"""``check --engine sglang==X`` and ``reproduce mllama-mixed-batch --engine sglang==X``: one decode batch
through an SGLang tree's own metadata builder, judged on the read side.

A batch is ``e:prompt:d`` per request (encoder tokens, prompt tokens, decoder
tokens at this decode step), or ``e:prompt:d:cached`` for a request whose
first ``cached`` input tokens a cached prefix holds (0, or the encoder and
up to all but one prompt token: SGLang caches the encoder part whole). Each
request must be admitted alone by the tree's own rule for the server
(``--context-len``, ``--kv-capacity``; its scheduler's limits, input check
and output cap, :mod:`crossattn_sizing.engine.sglang.admission`) and have
generated no more than that scheduler lets it (else it is bad input, exit 2:
the engine would never build metadata for it). Where the tree's rule cannot
be run, the harness's model of it decides, and the output says so. The
release's ``FlashAttentionBackend`` builds the decode metadata on the eager
path and on CUDA-graph replay, over a guarded ``req_to_token``; exit 0 when
both hold, 1 when one reads past a row (row, column and width printed), 3 when
a stand-in is missing (not run). A batch no server decodes (an encoder length
that is not a whole number of Mllama tiles, the pool overdrawn by the batch
at once: :func:`served_line`) is still judged, but a bad read on it is
"latent: no served request reaches it" (exit 0), never a failure.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from crossattn_sizing.base.errors import ConfigError, HarnessError, OptionError, ReleaseUnavailable
from crossattn_sizing.base.limits import MAX_INT_DIGITS, too_long
from crossattn_sizing.base.outcome import EXIT_FAILS, Outcome, exit_status
from crossattn_sizing.core.admission_rules import EngineRequest, SglangAdmission
from crossattn_sizing.core.batch_requests import cached_prefix, prefix_ok
from crossattn_sizing.core.check_line import batch_check_line as check_line
from crossattn_sizing.core.known_configs import LLAMA_32_VISION
from crossattn_sizing.core.served import LATENT, BatchAdmission, served_refusal
from crossattn_sizing.engine.client import EngineCrash

if TYPE_CHECKING:
    from crossattn_sizing.engine.sglang.client import OwnAdmission

Triple = tuple[int, ...]
"""``(e, prompt, d)`` or ``(e, prompt, d, cached)``."""


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


def request_triples(text: str) -> list[Triple]:
    """``e:prompt:d[:cached],...`` as integers (the form only; :func:`parse_requests` asks the rule)."""
    out = []
    for part in text.split(","):
        fields = part.split(":")
        if len(fields) not in (3, 4):
            raise ConfigError(
                "--requests", part, "each request is e:prompt:d (encoder, prompt, decoder tokens), or "
                "e:prompt:d:cached with a cached prefix"
            )
        request = tuple(int_option("--requests", f, 0) for f in fields)
        if not prefix_ok(request):
            raise ConfigError("--requests", part, "a cached prefix is 0, or covers the encoder and leaves at "
                              "least one prompt token (e <= cached < e + prompt)")
        out.append(request)
    return out


def parse_requests(text: str, rule: SglangAdmission | OwnAdmission) -> list[Triple]:
    """``e:prompt:d[:cached],...``, each admitted alone and within what the scheduler lets it generate."""
    out = []
    for triple, part in zip(request_triples(text), text.split(","), strict=True):
        e, p, d = triple[:3]
        request = EngineRequest(e, p, max(0, d - p))
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
        out.append(triple)
    return out


def run_check(
    spec: str, context_text: str | int, kv_text: str | int, requests_text: str, deadline: float | None = None
) -> int:
    """Judge one batch under ``spec``'s own builder; the exit status (0 holds, 1 fails, 3 not run).

    ``deadline``: seconds each call into the tree may take (``--call-timeout``; None: its setting).
    """
    from crossattn_sizing.engine.sglang.client import OwnAdmission, SglangReads, sglang_worker

    context_len = int_option("--context-len", str(context_text), 8)
    kv_capacity = int_option("--kv-capacity", str(kv_text), 8)
    request_triples(requests_text)  # the form is bad input before any tree is started
    worker = sglang_worker(spec, deadline)
    reads = SglangReads(spec, deadline=deadline)
    own = reads.admission(context_len, kv_capacity)
    if isinstance(own, dict) and own["verdict"] == "fails":  # the tree's admission code hung or exited
        print(f"FAIL  admission: {own['message']}")
        return EXIT_FAILS
    rule: SglangAdmission | OwnAdmission = own if isinstance(own, OwnAdmission) else SglangAdmission(
        context_len, kv_capacity)
    batch = parse_requests(requests_text, rule)
    note = getattr(worker.release, "note", "")
    if note:
        print(f"note: {note}")
    print(f"engine:    {spec} FlashAttentionBackend decode metadata (the release's own code; docs/engine.md)")
    if worker.ready.get("range"):
        print(f"release:   {worker.ready['range']}")
    if isinstance(own, dict):  # its admission steps did not run: the harness's model admitted the batch
        print(f"NOT RUN admission: {spec}: {own['reason']}; the requests were checked against the harness's "
              "model of SGLang's limits instead")
    try:
        width: Any = worker.request("width", context_len=context_len)
    except EngineCrash as exc:  # the tree's own sizing hung or ended its process: that batch fails
        print(f"FAIL  width: the tree's row sizing did not return: {exc}")
        print(f"  reproduce: {check_line(spec, context_len, kv_capacity, batch)}")
        return EXIT_FAILS
    except ReleaseUnavailable as exc:
        print(f"NOT RUN width: {spec}: {exc}")
        return exit_status([Outcome.NOT_RUN])
    limits_from = "the release's own limits" if isinstance(rule, OwnAdmission) else "the harness's model"
    if width is None:  # the release's sizing did not run under the harness (its verdicts say why)
        width = "unknown (the release's sizing did not run)"
    print(
        f"server:    context_len {context_len}, kv_capacity {kv_capacity}; req_to_token row width {width} "
        f"(the release's sizing); max_req_len {rule.max_req_len}, max_req_input_len {rule.max_req_input_len} "
        f"({limits_from})"
    )
    for i, (e, p, d, *_) in enumerate(batch):
        cached = f", cached prefix {cached_prefix(batch[i])}" if cached_prefix(batch[i]) else ""
        print(f"request {i}: encoder {e}, prompt {p}, decoder tokens at this step {d} (columns "
              f"0..{e + d - 1}){cached}")
    unserved = served_line(kv_capacity, batch)
    outcomes: list[Outcome] = [Outcome.NOT_RUN] if isinstance(own, dict) else []
    written = reads.write(context_len, batch)
    if written["verdict"] == "fails":
        print(f"FAIL  write: {written['message']}")
        print(f"  reproduce: {check_line(spec, context_len, kv_capacity, batch)}")
        return EXIT_FAILS
    if written["verdict"] == "not run":
        print(f"NOT RUN write: {spec}: {written['reason']}")
        return exit_status([Outcome.NOT_RUN])
    print(f"OK    write: every token the batch writes lands in its row (width {written['width']})")
    for path, verdict in reads.verdicts(context_len, batch).items():
        ok = "every column gathered lies in its row; the kernel reads only its own"
        outcomes.append(path_outcome(path, verdict, spec, ok, verdict.get("message", ""), unserved))
    status = exit_status(outcomes)
    if status == EXIT_FAILS:
        print(f"  reproduce: {check_line(spec, context_len, kv_capacity, batch)}")
    return status


def path_outcome(path: str, verdict: dict[str, Any], spec: str, ok: str, failed: str,
                 unserved: str | None = None) -> Outcome:  # fmt: skip
    """Print one path's verdict as ``check`` shows it (``ok`` when it holds, ``failed`` when it fails) and
    return its outcome; a failure on a batch no server decodes (``unserved`` says why) is latent."""
    if verdict["verdict"] == "holds":
        print(f"OK    {path}: {ok}")
        return Outcome.HOLDS
    if verdict["verdict"] == "fails" and unserved is not None:
        print(f"LATENT {path}: {failed} ({LATENT}: {unserved})")
        return Outcome.LATENT
    if verdict["verdict"] == "fails":
        print(f"FAIL  {path}: {failed}")
        return Outcome.FAILS
    print(f"NOT RUN {path}: {spec}: {verdict['reason']}")
    return Outcome.NOT_RUN


def served_line(kv_capacity: int, batch: list[Triple]) -> str | None:
    """Print whether a server decodes ``batch`` (Mllama images of whole tiles, the batch within the pool
    all at once: :mod:`crossattn_sizing.core.served`); the reason when it does not, else None."""
    from crossattn_sizing.models.served_inputs import mllama_images

    model = mllama_images()
    why = served_refusal(model, BatchAdmission(kv_capacity), batch)
    if why is None:
        print(f"served:    yes: {model.model} ({model.source}), the batch within the pool of {kv_capacity}")
    else:
        print(f"served:    no: {why}")
    return why


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


MLLAMA_MIXED_BATCH = "mllama-mixed-batch"
"""Issue 28's batch: a 4-tile Mllama image request beside a 3000-token text request."""


def run_startup_check(spec: str, context_text: str | None, sizes_text: str, running_text: str | None,
                      source_text: str | None, deadline: float | None = None) -> int:
    """One server's start-up batches (the CUDA-graph runner's dummy batches) through the tree's own code;
    the exit status (0 both paths hold, 1 one fails, 3 not run)."""
    from crossattn_sizing.engine.sglang.client import SglangStartup
    from crossattn_sizing.engine.sglang.startup_client import StartupServer
    from crossattn_sizing.engine.sglang.startup_client import check_line as startup_line

    if context_text is None:
        raise HarnessError(f"--context-len: required with --engine {spec} --cuda-graph-bs")
    context_len = int_option("--context-len", str(context_text), 8)
    sizes = tuple(sorted({int_option("--cuda-graph-bs", part, 1) for part in sizes_text.split(",")}))
    running = max(sizes) if running_text is None else int_option("--max-running-requests", running_text, 1)
    if max(sizes) > running:
        raise ConfigError("--cuda-graph-bs", sizes_text, f"every capture size must be at most "
                          f"--max-running-requests ({running}): the runner captures no larger batch")
    source = None if source_text is None else int_option("--max-source-positions", source_text, 1)
    server = StartupServer(context_len, sizes, running, source)
    judge = SglangStartup(spec, deadline)
    verdicts = judge.verdicts(server)  # starts the worker: a tree that does not load is one line first
    print(f"engine:    {spec} CUDA-graph runner dummy batches through FlashAttentionBackend's capture and "
          "replay (the release's own code; docs/engine.md)")
    print(*(line.strip() for line in server.lines()))
    outcomes = []
    for path, verdict in verdicts.items():
        where = f" ({verdict['where']})" if verdict.get("where") else ""
        failed = f"{verdict.get('headline')}{where}: {verdict.get('message')}"
        ok = "every dummy request fits its row; the kernel reads only its own columns"
        outcomes.append(path_outcome(path, verdict, spec, ok, failed))
    status = exit_status(outcomes)
    if status == EXIT_FAILS:
        print(f"  reproduce: {startup_line(spec, server)}")
    return status


def run_check_command(spec: str, args: argparse.Namespace) -> int:
    """``check --engine sglang==X``: ``--context-len``, ``--kv-capacity`` and ``--requests`` are required;
    with ``--cuda-graph-bs`` (and ``--context-len``) the start-up batches are judged instead."""
    deadline = getattr(args, "call_timeout", None)  # --call-timeout; None: CROSSATTN_CALL_TIMEOUT, else 60
    if getattr(args, "cuda_graph_bs", None) is not None:
        for flag, value in (("--kv-capacity", args.kv_capacity), ("--requests", args.requests)):
            if value is not None:
                raise OptionError(flag, value, "does not apply with --cuda-graph-bs: a start-up check judges "
                                  "the runner's own dummy batches, not requests")
        return run_startup_check(spec, args.context_len, args.cuda_graph_bs, args.max_running_requests,
                                 args.max_source_positions, deadline)
    for flag in ("--max-running-requests", "--max-source-positions"):
        value = getattr(args, flag.removeprefix("--").replace("-", "_"), None)
        if value is not None:
            raise OptionError(flag, value, "applies only with --cuda-graph-bs (a start-up check)")
    missing = [o for o, v in (("--context-len", args.context_len), ("--kv-capacity", args.kv_capacity),
                              ("--requests", args.requests)) if v is None]  # fmt: skip
    if missing:
        raise HarnessError(f"{', '.join(missing)}: required with --engine {spec}")
    return run_check(spec, args.context_len, args.kv_capacity, args.requests, deadline)


def run_reproduce(spec: str, args: argparse.Namespace) -> int:
    """``reproduce mllama-mixed-batch --engine sglang==X``: the batch through that tree's own FA3 metadata."""
    if args.model != MLLAMA_MIXED_BATCH:
        raise OptionError("--engine", spec, f"SGLang reproduces {MLLAMA_MIXED_BATCH} only (a batch judged "
                          "by the release's own metadata builder)")
    context_len, kv_capacity, batch, why = mllama_mixed_batch()
    print(f"reproduce {MLLAMA_MIXED_BATCH}: {why}")
    requests = ",".join(f"{e}:{p}:{d}" for e, p, d in batch)
    return run_check(spec, context_len, kv_capacity, requests)


def run_map(spec: str, args: argparse.Namespace) -> int:
    """``map --engine sglang==X``: SGLang's read-side plane, the issue's batch judged by the release.

    ``args.out`` is the checked, absolute picture path (the command resolves it).
    """
    from crossattn_sizing.engine.sglang.client import SglangReads
    from crossattn_sizing.findings.capacity_map import require_matplotlib
    from crossattn_sizing.findings.sglang_map import draw_sglang

    require_matplotlib()
    context_len = int_option("--context-len", args.context_len or "8192", 8)
    _, _, batch, _ = mllama_mixed_batch()
    (e, p, _d), (_, p2, d2) = batch
    markers = []
    if e + p + 1 < context_len - 6 and p2 + 1 < context_len - 6:
        found = SglangReads(spec).first_problem(context_len, batch)
        markers.append(("Mllama 4 tiles + 3000-token text", e, d2, "holds" if found is None else found[0]))
    draw_sglang(spec, context_len, markers, args.out)
    print(f"wrote {args.out}: SGLang's read-side plane at context_len {context_len}"
          + "".join(f"; {m[0]}: {spec} {m[3]}" for m in markers))
    return 0
