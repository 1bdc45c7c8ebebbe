"""``crossattn-sizing reproduce``: a real model's config under a sizing policy, the bug or why it is safe.

``reproduce nemotron-parse`` is the regression reproducer of the issue PR
#46753 fixed: a 2048x1664 page (3329 encoder tokens at patch 16) with
``--max-model-len 2048`` and block size 16. Under ``--policy mrv2-prefix`` it
names the encoder tokens without a column, the columns needed and given, what
the guard refuses and how far the unguarded output drifts from a correctly
sized run, and exits 1; under ``mrv2`` (the default) it says why the row is
wide enough and exits 0. ``whisper``, ``bart``, ``mbart`` and ``--config FILE``
(a transformers config.json or a harness RunnerConfig JSON) run the same way.
A model's defaults (Nemotron-Parse's page and ``--max-model-len``) are its
family's :class:`~crossattn_sizing.models.family.KnownCase`: this command
names no model. Bad input is one line and exit 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any

from crossattn_sizing.base.errors import ConfigError, OptionError, refuse_spelling
from crossattn_sizing.base.outcome import Outcome, exit_status
from crossattn_sizing.commands import options
from crossattn_sizing.commands.engines import engine_of
from crossattn_sizing.core.check_line import check_line
from crossattn_sizing.core.policies import BUILTIN_POLICIES, policy_name
from crossattn_sizing.findings.graph_capture import capture_lines
from crossattn_sizing.models import adapters, loading, nemotron_parse_config
from crossattn_sizing.models.adapters import ModelScenario
from crossattn_sizing.models.families import FAMILIES
from crossattn_sizing.models.family import KnownCase
from crossattn_sizing.models.scenario import (
    ScenarioVerdict,
    failure_lines,
    fixed_width_hint,
    judge,
    safe_reason,
)
from crossattn_sizing.specs.resolve import load_checked_policy

DESCRIPTION = (
    "Run a real model's config under a sizing policy. 'reproduce nemotron-parse' replays the bug PR "
    "#46753 fixed: a 2048x1664 page (3329 encoder tokens at patch 16), --max-model-len 2048, block size "
    "16. Under --policy mrv2-prefix it names the encoder tokens without a column, the columns needed and "
    "given, what the guard refuses and how far the unguarded output drifts, and exits 1; under mrv2 (the "
    "default) it says why the row is wide enough and exits 0. Bad input: one line, exit 2."
)
DEFAULT_BLOCK_SIZE = 16
MAX_SIMULATED_TOKENS = 1 << 16  # the drift run allocates e tokens of K/V per request on the host

# reproduce's own counts, parsed as every integer option is (``prove`` takes the same names as LISTs).
MAX_MODEL_LEN = options.Option("--max-model-len", "decoder length M", metavar="N", parse=options.integer(1))
DCP = options.Option("--dcp", "decode-context-parallel size C", metavar="N", parse=options.integer(1))
ENCODER_LEN = options.Option(
    "--encoder-len",
    "encoder tokens e of the request (BART source length; required for a model with no rule)",
    metavar="N", parse=options.integer(1),
)  # fmt: skip
BATCHED_TOKENS = options.Option("--max-num-batched-tokens", "B", metavar="N", parse=options.integer(1))
ENCODER_BUDGET = options.Option(
    "--encoder-budget", "E, max_num_encoder_input_tokens", metavar="N", parse=options.integer(1),
)  # fmt: skip


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``reproduce``: its options and its help."""
    p = subparsers.add_parser(
        "reproduce",
        help="run a real model's config (nemotron-parse, whisper, bart, mbart, or --config) under a policy",
        description=DESCRIPTION,
    )
    models = ", ".join(adapters.MODEL_NAMES)
    p.add_argument("model", nargs="?", help=f"one of {models}, or mllama-mixed-batch (--engine sglang==X)")
    options.CONFIG.add(p)
    options.POLICY.add(p, shown_default="mrv2")  # None when not typed: --engine refuses it
    p.add_argument("--image-size", help="nemotron-parse page HEIGHTxWIDTH in pixels (default 2048x1664)")
    MAX_MODEL_LEN.add(p, shown_default="derived from the config; 2048 for nemotron-parse")
    options.BLOCK_SIZE.add(p, shown_default=str(DEFAULT_BLOCK_SIZE))
    DCP.add(p, shown_default="1")
    ENCODER_LEN.add(p)
    refuse_spelling(p.add_argument, "--encoder-tokens", ENCODER_LEN.flag)
    BATCHED_TOKENS.add(p, shown_default="smallest power of two >= max(M, e)")
    ENCODER_BUDGET.add(p, shown_default="B, as the scheduler")
    refuse_spelling(p.add_argument, "--max-num-encoder-input-tokens", ENCODER_BUDGET.flag)
    options.IMPL.add(p, shown_default="torch")
    options.SEED.add(p, default=0)
    options.ENGINE.add(p)
    p.set_defaults(func=run)


def build(args: argparse.Namespace) -> ModelScenario:
    """The scenario the options describe; every bad combination is a ConfigError."""
    if (args.model is None) == (args.config is None):
        raise ConfigError("model", args.model, "give a model name or --config FILE (exactly one)")
    max_model_len, block_size, dcp_size = args.max_model_len, args.block_size, args.dcp
    tokens, batched = args.encoder_len, args.max_num_batched_tokens
    encoder_budget = args.encoder_budget
    image_size = nemotron_parse_config.parse_image_size(args.image_size) if args.image_size else None
    if args.config is not None:
        data = loading.read_json(args.config)
        if loading.is_runner_config(data):
            for option, value in (("--block-size", block_size), ("--image-size", image_size),
                                  ("--max-num-batched-tokens", batched),
                                  ("--encoder-budget", encoder_budget)):
                if value is not None:
                    raise ConfigError(option, value, "applies to model configs; edit the RunnerConfig JSON")
            return loading.runner_scenario(data, max_model_len=max_model_len, dcp_size=dcp_size,
                                           encoder_len=tokens)
        hf_config = adapters.hf_config_from_dict(data)
        case = KnownCase()  # a config the user gave: its own values, no reproducer's defaults
    else:
        if args.model not in adapters.MODEL_NAMES:
            known = ", ".join(adapters.MODEL_NAMES)
            raise ConfigError("model", args.model, f"must be one of {known} (or use --config FILE)")
        hf_config = adapters.default_hf_config(args.model)
        case = FAMILIES[args.model].known_case or KnownCase()
    if image_size is None:
        image_size = case.image_size
    default_m = max_model_len is None and case.max_model_len is not None
    scenario = adapters.build_scenario(
        hf_config,
        max_model_len=case.max_model_len if default_m else max_model_len,
        block_size=block_size if block_size is not None else DEFAULT_BLOCK_SIZE,
        dcp_size=dcp_size if dcp_size is not None else 1,
        max_num_batched_tokens=batched,
        max_num_encoder_input_tokens=encoder_budget,
        image_size=image_size,
        source_len=tokens,
    )
    if default_m:
        m = scenario.max_model_len
        default = f"the reproducer's default for {args.model} ({case.why});"
        why = m.why.replace("given;", default)
        scenario = dataclasses.replace(scenario, max_model_len=adapters.Derived(m.value, why))
    return scenario


def _fmt(x: float) -> str:
    return "NaN (read cells nobody wrote)" if math.isnan(x) else f"{x:.4g}"


def load_drift_impl(impl_spec: str) -> tuple[Any, str]:
    """The implementation for the drift run, or None and why it cannot run (no torch installed).

    Loaded before anything is printed, so a bad ``--impl`` is one line and exit 2.
    """
    try:
        from crossattn_sizing.specs.resolve import load_impl
    except ImportError as exc:
        return None, f"not simulated ({exc}; install the 'torch' extra)"
    return load_impl(impl_spec, "cpu"), ""


def drift_lines(
    scenario: ModelScenario, verdict: ScenarioVerdict, impl: Any, why_not: str, seed: int
) -> list[str]:
    """The guarded refusal and the unguarded output drift of each cross group, or why not run."""
    config = scenario.config
    e = scenario.encoder_len.value
    if impl is None:
        return [f"unguarded: {why_not}"]
    if config.dcp_size != 1:
        return ["unguarded: not simulated with --dcp > 1 (the engine's cross path ignores DCP; "
                "see the findings of `crossattn-sizing verify`)"]
    if e > MAX_SIMULATED_TOKENS:
        return [f"unguarded: not simulated ({e} encoder tokens is more than this run allocates)"]
    from crossattn_sizing.models.drift import output_drift

    lines = []
    for cv in verdict.cross:
        result = output_drift(config, cv.group, cv.width, e, impl, seed)
        if result.guarded_refusal:
            lines.append(f"guarded:   refused on the host before any kernel runs: {result.guarded_refusal}")
        if result.max_error == 0:
            lines.append(f"unguarded: cross group {cv.group} output matches the correctly-sized run "
                         f"(max abs error 0, impl {impl.name}, seed {seed})")
            continue
        if result.spilled_entries:
            lines.append(f"unguarded: {result.spilled_entries} row entries of request 0 spill into row 1; "
                         "request 0's missing columns then name request 1's blocks")
        per_request = ", ".join(f"request {r}: {_fmt(x)}" for r, x in enumerate(result.errors))
        lines.append(f"           output drift vs the correctly-sized run: max abs error "
                     f"{_fmt(result.max_error)} ({per_request}; the correct output's largest magnitude "
                     f"is {result.scale:.4g}; impl {impl.name}, seed {seed})")
    return lines


def run(args: argparse.Namespace) -> int:
    """Run a real model's config under a policy (or an engine's own code); the exit status."""
    engine = engine_of(args, "reproduce")  # options that do not apply to the engine: refused first
    if engine is not None and engine.subject is None:  # the engine reproduces its own batch
        return engine.command("reproduce")(engine.spec, args)
    if args.model == MLLAMA_MIXED_BATCH:
        raise OptionError("--engine", "", f"{MLLAMA_MIXED_BATCH} takes sglang==X or sglang@PATH (the "
                          "batch is judged by that engine's own code)")
    if engine is not None:  # the release is the policy and the implementation
        args.policy = args.impl = engine.subject
    args.policy = "mrv2" if args.policy is None else args.policy
    args.impl = "torch" if args.impl is None else args.impl
    policy = load_checked_policy(args.policy)
    seed = args.seed
    scenario = build(args)
    impl, why_not = load_drift_impl(args.impl)
    config = scenario.config
    verdict = judge(policy, scenario)
    builtin = BUILTIN_POLICIES.get(args.policy)
    summary = f" ({builtin.summary})" if builtin else ""
    s = config.max_source_positions
    print(f"reproduce {args.model or args.config} under sizing policy {policy_name(policy)!r}{summary}")
    print(f"  encoder tokens:   {scenario.encoder_len.value} per request: {scenario.encoder_len.why}")
    print(f"  max_model_len:    {scenario.max_model_len.value}: {scenario.max_model_len.why}")
    print(f"  batched tokens:   {scenario.batched_tokens.value}: {scenario.batched_tokens.why}")
    shown_s = "absent (the config has no max_source_positions)" if s is None else str(s)
    print(f"  source positions: {shown_s}")
    print(f"  config:           {config.describe()}")
    print(f"  widths given:     {verdict.widths} entries per group")
    if verdict.outcome == Outcome.HOLDS:
        for line in safe_reason(verdict, scenario):
            print(f"OK    {line}")
        for cv in verdict.cross:
            print(f"  this request:     {cv.encoder_len} encoder tokens need {cv.needed} columns of "
                  f"{cv.tokens_per_entry} tokens")
    else:
        lines = failure_lines(verdict, config)
        print(f"FAIL  {lines[0]}")
        for line in lines[1:]:
            print(f"  {line}")
    for line in drift_lines(scenario, verdict, impl, why_not, seed):
        print(f"  {line}")
    if config.cross_groups():
        for line in capture_lines(config, scenario.encoder_len.value):
            print(f"  {line}")
    if engine is not None:  # the request through the release's own tables and kernel
        for line in engine.family.subject_lines(policy, scenario):
            print(f"  {line}")
    if verdict.outcome == Outcome.FAILS:
        print(f"  fix:       {fixed_width_hint(scenario)}")
        lens = [scenario.encoder_len.value] * config.max_num_reqs
        print(f"  reproduce: {check_line(args.policy, config, lens)}")
    return exit_status([verdict.outcome])


MLLAMA_MIXED_BATCH = "mllama-mixed-batch"
"""Issue 28's SGLang batch: a 4-tile Mllama image request beside a 3000-token text request (an engine's
own run of ``reproduce``)."""
