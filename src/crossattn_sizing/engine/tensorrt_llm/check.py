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

from crossattn_sizing.base.errors import ConfigError, HarnessError, OptionError
from crossattn_sizing.base.jsoninput import read_json_option
from crossattn_sizing.base.limits import MAX_INT_DIGITS, too_long
from crossattn_sizing.base.outcome import Outcome, exit_status
from crossattn_sizing.core.cross_pool import (
    CrossPoolCase,
    CrossPoolNotRun,
    harness_stopped,
    whisper_large_v3_case,
)
from crossattn_sizing.engine.tensorrt_llm.sizer import TrtllmCrossPool, tensorrt_llm_worker


def cross_pool_sizer(spec: str, deadline: float | None = None) -> TrtllmCrossPool:
    """The tree's sizer for ``spec``, its worker started now (bad input is one line before any work;
    a file the harness cannot read is :class:`CrossPoolNotRun`)."""
    tensorrt_llm_worker(spec, deadline)
    return TrtllmCrossPool(spec.strip())


def judge_case(spec: str, case: CrossPoolCase, deadline: float | None = None) -> int:
    """Print one case under the tree ``spec``'s sizing and its verdict; the exit status (0 holds, 1 fails,
    3 not run: the tree's code could not be asked, or the harness's own code stopped)."""
    try:
        sizer = cross_pool_sizer(spec, deadline)
        print(f"engine:         {sizer.name}: {sizer.function}")
        pool = sizer.pool_len(case)
        found = case.overflows(pool)
        lines = case.describe(pool)
    except CrossPoolNotRun as exc:
        return _not_run(case, str(exc))
    except HarnessError:  # bad input: the CLI's one line, exit 2
        raise
    except Exception as exc:  # the harness's own code: one line, not a verdict
        return _not_run(case, harness_stopped("cross-pool judge", exc))
    for line in lines:
        print(line)
    for use in found:
        print(f"FAIL  the request's encoder tokens need {use.needed} {use.unit} of the cross pool, which "
              f"holds "
              f"{use.width}: the attention metadata for it cannot be prepared")  # fmt: skip
    if found:
        print(f"  reproduce: {case.check_line(sizer.name)}")
        return exit_status([Outcome.FAILS])
    print(f"OK    {case.encoder_len} encoder tokens fit the cross pool of {pool} tokens")
    return exit_status([Outcome.HOLDS])


def _not_run(case: CrossPoolCase, reason: str) -> int:
    for line in case.describe():
        print(line)
    print(f"NOT RUN {reason}")
    return exit_status([Outcome.NOT_RUN])


def run_check(spec: str, args: argparse.Namespace) -> int:
    """``check --engine SPEC --config JSON --encoder-len E``: one case under the engine's own sizing (the
    options it does not take were refused by :mod:`crossattn_sizing.engine.tensorrt_llm.family`)."""
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
    return judge_case(spec, case, getattr(args, "call_timeout", None))


def run_reproduce(spec: str, args: argparse.Namespace) -> int:
    """``reproduce whisper --engine SPEC``: Whisper-large-v3's 1500 frames under the engine's defaults."""
    if args.model != "whisper":
        raise OptionError(
            "--engine", spec, f"reproduce takes whisper with --engine {spec} (not {args.model or 'none'})"
        )
    if args.seed:  # --seed defaults to 0 here, so the family cannot tell it was typed; nothing is drawn
        raise OptionError("--seed", args.seed, f"does not apply with --engine {spec}: the case is fixed")
    case = whisper_large_v3_case()
    print(
        "reproduce whisper: Whisper-large-v3 (30 s of audio -> 1500 encoder frames) under TensorRT-LLM's "
        "defaults (max_input_len 1024, tokens_per_block 32); upstream issue #19514"
    )
    return judge_case(spec, case)
