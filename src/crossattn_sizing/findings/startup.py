"""verify's start-up row: an engine's own start-up batches (profile, warm-up, capture), judged per release.

Start-up batches are built by the engine from its settings alone, so a
failure is reachable whenever the settings start a server. The row runs the
release's code (through its worker: ``policy.startup``) over a fixed grid of
settings around the edges that matter (``max_num_batched_tokens`` one below,
at and one above ``max_num_seqs * max_model_len``, rows that are exactly
``max_model_len`` long, every default capture size up to ``B``), beside the
Nemotron-Parse serving shape, whose encoder reservation it reports. The grid
is deterministic, like the DCP finding's search: the same release gives the
same row.
"""

from __future__ import annotations

from typing import Any

from crossattn_sizing.base.intmath import cdiv
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.core import known_configs
from crossattn_sizing.core.check_line import startup_check_line
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.core.startup_checks import EncoderReservation
from crossattn_sizing.findings.results import Finding, PropertyResult

NAME = "startup::batches_fit_their_rows"
CAPTURE_SIZES = (1, 2, 4, 8, 16, 24, 32, 64, 128, 256, 512)
"""vLLM's default capture sizes, up to its default largest (512); each is kept up to ``B``."""
M = 2048
BLOCK = 16


def grid() -> list[tuple[RunnerConfig, tuple[int, ...]]]:
    """The settings the row runs: decoder-only and encoder-decoder, ``B`` around ``N * M``; Nemotron-Parse."""
    out: list[tuple[RunnerConfig, tuple[int, ...]]] = [(known_configs.nemotron_parse(), CAPTURE_SIZES)]
    for enc_dec in (False, True):
        groups = (KVCacheGroup(GroupKind.FULL, BLOCK), KVCacheGroup(GroupKind.CROSS, BLOCK)) if enc_dec else (
            KVCacheGroup(GroupKind.FULL, BLOCK),)  # fmt: skip
        for n in (3, 1):  # within vLLM's warning first
            for b in (n * M - 1, n * M, n * M + 1):
                if b < (max(n, M) if enc_dec else n):
                    continue
                config = RunnerConfig(M, b, groups, max_num_encoder_input_tokens=b, max_num_reqs=n,
                                      is_encoder_decoder=enc_dec)  # fmt: skip
                out.append((config, tuple(s for s in CAPTURE_SIZES if s <= b)))
    return out


def startup_row(policy: Any, spec: str) -> PropertyResult:
    """The row: holds when every grid setting's start-up batches fit; fails at the first that doesn't."""
    ran = 0
    for config, sizes in grid():
        answer = policy.startup(config, sizes)
        if "not_run" in answer:
            return PropertyResult(NAME, Outcome.NOT_RUN, reason=f"start-up batches: {answer['not_run']}",
                                  examples=ran)  # fmt: skip
        ran += 1
        if not answer["holds"]:
            warned = config.max_num_batched_tokens > config.max_num_reqs * config.max_model_len
            note = " (vLLM logs a warning for B > max_num_seqs * max_model_len, and starts)" if warned else ""
            diagnosis = "\n".join([
                f"{spec}: start-up batches read past their rows on {config.describe()}{note}; "
                f"dummy lengths set at {answer['where']}:",
                *(f"  {line}" for line in answer["breaches"][:6]),
            ])  # fmt: skip
            replay = startup_check_line(spec, config, sizes)
            return PropertyResult(NAME, Outcome.FAILS, diagnosis=diagnosis, reproduce=replay, examples=ran)
    return PropertyResult(NAME, Outcome.HOLDS, examples=ran)


def encoder_reservation_finding(policy: Any, spec: str) -> Finding | None:
    """The Nemotron-Parse page against what the release warms up and captures with (its own code); None
    when the release reserves enough or its start-up did not run."""
    config = known_configs.nemotron_parse()
    answer = policy.startup(config, ())
    if "not_run" in answer or answer["encoder_len"] is None:
        return None
    cross = config.groups[config.cross_groups()[0]]
    found = EncoderReservation("Nemotron-Parse 2048x1664 page", cross.block_size, int(answer["encoder_len"]),
                               config.encoder_budget, known_configs.NEMOTRON_PAGE_TOKENS)  # fmt: skip
    if not found.short_blocks:
        return None
    page = 2 * cross.block_size * 2  # K and V, fp16, per unit of num_kv_heads * head_size
    detail = "\n".join([
        found.line(),
        f"max_encoder_len set at {answer['encoder_where']} (max_source_positions, else max_model_len); "
        f"bytes short per request and cross layer: {found.short_blocks} x {page} x num_kv_heads x head_size "
        f"(fp16); the memory profile is not short (it counts cdiv(E, bs) = "
        f"{cdiv(config.encoder_budget, cross.block_size)} blocks); docs/spec.md, encoder memory at start-up",
        f"replay: {startup_check_line(spec, config, ())}",
    ])  # fmt: skip
    return Finding(f"{spec}: warm-up and CUDA-graph capture reserve fewer encoder keys than one "
                   "Nemotron-Parse request uses", detail)  # fmt: skip
