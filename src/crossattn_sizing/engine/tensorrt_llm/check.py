"""``check`` and ``reproduce whisper`` with ``--engine tensorrt_llm@PATH``: one request against its pool.

The tree's own sizing answers how long the pool is
(:class:`~crossattn_sizing.engine.tensorrt_llm.sizer.TrtllmCrossPool`);
everything judged is the core's (:mod:`crossattn_sizing.core.cross_pool`):
whether an admitted request's encoder tokens fit the pool and its blocks.

- ``check --engine SPEC --config JSON --encoder-len E`` judges one case: the
  line a failure of the cross-pool property prints, replayed without Hypothesis;
- ``reproduce whisper --engine SPEC`` is that check on Whisper-large-v3 under
  TensorRT-LLM's defaults (issue 38).

``verify --engine SPEC`` runs the property itself
(:mod:`crossattn_sizing.runs.cross_pool_verify`), with :func:`cross_pool_sizer`.
Exit status as every command's: 0 holds, 1 fails, 2 bad input, 3 not run.
"""

from __future__ import annotations

import argparse
from typing import Any

from crossattn_sizing.base.errors import ConfigError, HarnessError, OptionError
from crossattn_sizing.base.jsoninput import read_json_option
from crossattn_sizing.base.limits import MAX_INT_DIGITS, too_long
from crossattn_sizing.base.outcome import Outcome, exit_status
from crossattn_sizing.core.cross_pool import CrossPoolCase, CrossPoolNotRun, whisper_large_v3_case
from crossattn_sizing.engine.tensorrt_llm.sizer import TrtllmCrossPool, tensorrt_llm_worker
from crossattn_sizing.engine.tensorrt_llm.source import is_tensorrt_llm_spec


def is_cross_pool_spec(spec: str | None) -> bool:
    """Whether ``--engine`` names an engine judged on the cross-pool layout (TensorRT-LLM)."""
    return spec is not None and is_tensorrt_llm_spec(spec)


def cross_pool_sizer(spec: str, deadline: float | None = None) -> TrtllmCrossPool:
    """The tree's sizer for ``spec``, its worker started now (bad input is one line before any work)."""
    tensorrt_llm_worker(spec, deadline)
    return TrtllmCrossPool(spec.strip())


def refuse_given(spec: str, given: dict[str, object]) -> None:
    """Refuse an option this engine's path does not honour, naming it (never dropped silently)."""
    for option, value in given.items():
        if value not in (None, False, [], ()):
            rule = (f"not taken with --engine {spec.strip()} (the cross-pool property has no sizing policy, "
                    "implementation or report files)")  # fmt: skip
            raise OptionError(option, value, rule)


def judge_case(sizer: Any, case: CrossPoolCase) -> int:
    """Print one case under ``sizer`` and its verdict; the exit status (0 holds, 1 fails, 3 not run)."""
    print(f"engine:         {sizer.name}: {sizer.function}")
    try:
        pool = sizer.pool_len(case)
    except CrossPoolNotRun as exc:
        for line in case.describe():
            print(line)
        print(f"NOT RUN {exc}")
        return exit_status([Outcome.NOT_RUN])
    for line in case.describe(pool):
        print(line)
    found = case.overflows(pool)
    for use in found:
        print(f"FAIL  the request's encoder tokens need {use.needed} {use.unit} of the cross pool, which "
              f"holds "
              f"{use.width}: the attention metadata for it cannot be prepared")  # fmt: skip
    if found:
        print(f"  reproduce: {case.check_line(sizer.name)}")
        return exit_status([Outcome.FAILS])
    print(f"OK    {case.encoder_len} encoder tokens fit the cross pool of {pool} tokens")
    return exit_status([Outcome.HOLDS])


def run_check(args: argparse.Namespace) -> int:
    """``check --engine SPEC --config JSON --encoder-len E``: one case under the engine's own sizing."""
    spec = args.engine.strip()
    refuse_given(spec, {"--context-len": args.context_len, "--kv-capacity": args.kv_capacity,
                        "--requests": args.requests,
                        "--policy": None if args.policy == "mrv2" else args.policy})  # fmt: skip
    missing = [o for o, v in (("--config", args.config), ("--encoder-len", args.encoder_lens)) if v is None]
    if missing:
        raise HarnessError(f"{', '.join(missing)}: required with --engine {spec}")
    text = args.encoder_lens.strip()
    if too_long(text):
        raise ConfigError("--encoder-len", text, f"integers may have at most {MAX_INT_DIGITS} digits")
    try:
        encoder_len = int(text)
    except ValueError:
        raise ConfigError("--encoder-len", text, f"one integer with --engine {spec} (one request)") from None
    case = CrossPoolCase.from_dict(read_json_option("--config", args.config), encoder_len)
    return judge_case(cross_pool_sizer(spec, options_deadline(args)), case)


def options_deadline(args: argparse.Namespace) -> float | None:
    """``--call-timeout`` where the command has it; ``--in-process`` is refused (trees run in a worker)."""
    if getattr(args, "in_process", False):
        rule = f"not taken with --engine {args.engine.strip()}: the engine's code always runs in its worker"
        raise OptionError("--in-process", True, rule)
    return getattr(args, "call_timeout", None)


def run_reproduce(args: argparse.Namespace) -> int:
    """``reproduce whisper --engine SPEC``: Whisper-large-v3's 1500 frames under the engine's defaults."""
    spec = args.engine.strip()
    if args.model != "whisper":
        raise OptionError(
            "--engine", spec, f"reproduce takes whisper with --engine {spec} (not {args.model})"
        )
    refuse_given(spec, {"--config": args.config, "--policy": args.policy, "--impl": args.impl,
                         "--image-size": args.image_size, "--max-model-len": args.max_model_len,
                         "--block-size": args.block_size, "--dcp": args.dcp,
                         "--encoder-len": args.encoder_len,
                         "--max-num-batched-tokens": args.max_num_batched_tokens,
                         "--encoder-budget": args.encoder_budget, "--seed": args.seed or None})  # fmt: skip
    case = whisper_large_v3_case()
    print(
        "reproduce whisper: Whisper-large-v3 (30 s of audio -> 1500 encoder frames) under TensorRT-LLM's "
        "defaults (max_input_len 1024, tokens_per_block 32); upstream issue #19514"
    )
    return judge_case(cross_pool_sizer(spec), case)
