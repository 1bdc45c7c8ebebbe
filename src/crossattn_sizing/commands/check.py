"""``crossattn-sizing check``: judge one config and batch of encoder lengths under a policy.

This is the reproduce command every capacity failure prints: it replays the
shrunk case without pytest or Hypothesis and prints the same diagnosis.
"""

from __future__ import annotations

import argparse

from crossattn_sizing.base.errors import (
    ConfigError,
    HarnessError,
    JudgedFailure,
    OptionError,
    refuse_spelling,
)
from crossattn_sizing.base.jsoninput import read_json_option
from crossattn_sizing.base.limits import MAX_INT_DIGITS, too_long
from crossattn_sizing.base.outcome import Outcome, exit_status
from crossattn_sizing.commands import options
from crossattn_sizing.commands.engines import engine_of
from crossattn_sizing.core import admission
from crossattn_sizing.core.capacity import violations
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.policies import checked_widths
from crossattn_sizing.specs.resolve import load_checked_policy


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``check``: its options and its help."""
    p = subparsers.add_parser("check", help="check one config and its requests under a sizing policy")
    options.POLICY.add(p, shown_default="mrv2")  # None when not typed: --engine refuses it
    options.CONFIG.add(p)  # required unless --engine names SGLang (checked in run)
    options.add_isolation(p)
    p.add_argument(
        "--encoder-len",
        dest="encoder_lens",
        help="comma-separated encoder token counts e of the requests, e.g. 3329,1500",
    )
    refuse_spelling(p.add_argument, "--encoder-lens", "--encoder-len")
    p.add_argument(
        "--startup",
        metavar="SIZES",
        help="with --engine vllm...: replay the release's own start-up batches (profile, warm-up, "
        "CUDA-graph capture) for --config, SIZES its capture sizes (comma-separated, or 'none'); "
        "instead of --encoder-len",
    )
    options.ENGINE.add(p)
    options.CONTEXT_LEN.add(p)
    p.add_argument("--kv-capacity", help="with --engine sglang: the KV pool's capacity in tokens")
    p.add_argument("--requests", help="with --engine sglang: e:prompt:d per request (e:prompt:d:cached "
                   "with a cached prefix), comma-separated")
    for flag, text in STARTUP_OPTIONS.items():
        p.add_argument(flag, help=text)
    p.set_defaults(func=run)


STARTUP_OPTIONS = {
    "--cuda-graph-bs": "with --engine sglang: judge the start-up batches instead of --requests: the "
                       "CUDA-graph capture sizes, comma-separated",
    "--max-running-requests": "with --cuda-graph-bs: the server's --max-running-requests (default: the "
                              "largest capture size)",
    "--max-source-positions": "with --cuda-graph-bs: the model config's max_source_positions (default: none "
                              "declared)",
}
"""``check``'s start-up options (SGLang's own flag names): only ``--engine sglang...`` takes them."""


def parse_config(text: str) -> RunnerConfig:
    """A config from JSON text or from a file holding it.

    An encoder-decoder config needs a cross-attention group: without one there
    is no encoder token to check, and "OK" would be a verdict on nothing.
    """
    config = RunnerConfig.from_dict(read_json_option("--config", text))
    if config.is_encoder_decoder and not config.cross_groups():
        kinds = [g.kind.value for g in config.groups]
        raise ConfigError("groups", kinds, "an encoder-decoder config needs a cross-attention group")
    return config


def comma_ints(option: str, text: str, rule: str) -> list[int]:
    """``text``'s comma-separated integers; a part that is not one (or is too long) is one line naming
    ``option`` and ``rule``."""
    out = []
    for part in text.split(","):
        if too_long(part):
            raise ConfigError(option, part, f"integers may have at most {MAX_INT_DIGITS} digits")
        try:
            out.append(int(part))
        except ValueError:
            raise ConfigError(option, part, rule) from None
    return out


def parse_lengths(text: str, config: RunnerConfig) -> list[int]:
    """The encoder lengths, each admitted by the config; a config with no cross group takes none.

    Without a cross-attention group no encoder token is stored in any row, so
    "OK" would be a verdict on tokens nobody checked.
    """
    if not config.cross_groups():
        kinds = ", ".join(g.kind.value for g in config.groups)
        raise ConfigError("--encoder-len", text, f"the config has no cross-attention group "
                          f"(groups: {kinds}): there are no encoder tokens to judge")
    out = []
    for value in comma_ints("--encoder-len", text, "must be comma-separated integers"):
        if not admission.admits(config, value):
            raise ConfigError(
                "--encoder-len",
                value,
                f"is not admitted by this config (1 <= e <= min(E, B) = {admission.encoder_bound(config)})",
            )
        out.append(value)
    return out


def run(args: argparse.Namespace) -> int:
    """Check one config and its encoder lengths under a policy (or an engine's own); the exit status."""
    engine = engine_of(args, "check")  # options that do not apply to the engine: refused first
    if args.startup is not None and engine is not None and engine.subject is None:
        raise HarnessError(f"--startup {args.startup}: does not apply with --engine {engine.spec} (start-up "
                           "batches are run for vLLM's releases)")  # fmt: skip
    for flag in STARTUP_OPTIONS:
        value = getattr(args, flag.removeprefix("--").replace("-", "_"))
        if value is not None and (engine is None or engine.family.name != "sglang"):
            raise OptionError(flag, value, "applies only with --engine sglang==X or sglang@PATH (SGLang's "
                              "CUDA-graph start-up batches)")
    if engine is not None and engine.subject is None:  # the engine judges one batch its own way
        return engine.command("check")(engine.spec, args)
    if engine is not None:
        args.policy = engine.subject
    args.policy = "mrv2" if args.policy is None else args.policy
    if args.startup is not None:
        return run_startup(args, engine is not None)
    missing = [o for o, v in (("--config", args.config), ("--encoder-len", args.encoder_lens)) if v is None]
    if missing:
        raise HarnessError("the following arguments are required: " + ", ".join(missing))
    isolation = options.isolation(args)
    policy = load_checked_policy(args.policy, isolation)
    config = parse_config(args.config)
    if isolation.note:
        print(f"note:           {isolation.note}")
    lens = parse_lengths(args.encoder_lens, config)
    print(f"policy:         {args.policy}")
    print(f"config:         {config.describe()}")
    print(f"encoder tokens: {lens}")
    try:
        print(f"widths given:   {checked_widths(policy, config)} entries per group")
    except JudgedFailure as exc:  # an engine's sizing ended its worker or did not answer in time: a verdict
        print(f"FAIL  {exc}")
        return exit_status([Outcome.FAILS])
    found = violations(policy, config, lens)
    for v in found:
        print(f"FAIL  {v.explain()}")
    if not found:
        print("OK    every encoder and decoder token has a column, and every row holds what it receives")
    return exit_status([Outcome.FAILS if found else Outcome.HOLDS])


def parse_capture_sizes(text: str, config: RunnerConfig) -> tuple[int, ...]:
    """``--startup``'s capture sizes: ``none``, or comma-separated integers in 1..``B``."""
    if text.strip() == "none":
        return ()
    out = []
    for value in comma_ints("--startup", text, "must be comma-separated capture sizes, or none"):
        if not 1 <= value <= config.max_num_batched_tokens:
            raise ConfigError("--startup", value, f"a capture size must be in 1..max_num_batched_tokens "
                              f"({config.max_num_batched_tokens})")  # fmt: skip
        out.append(value)
    return tuple(sorted(set(out)))


def run_startup(args: argparse.Namespace, engine: bool) -> int:
    """``check --engine vllm... --startup SIZES``: the release's start-up batches for one config, judged."""
    if not engine:
        raise HarnessError("--startup needs --engine vllm, vllm==X or vllm@PATH: start-up batches are the "
                           "release's own code")  # fmt: skip
    if args.encoder_lens is not None:
        raise HarnessError("--startup and --encoder-len: start-up batches are built from the settings alone; "
                           "give one of them")  # fmt: skip
    if args.config is None:
        raise HarnessError("the following arguments are required: --config")
    config = parse_config(args.config)
    sizes = parse_capture_sizes(args.startup, config)
    policy = load_checked_policy(args.policy, options.isolation(args))
    startup = getattr(policy, "startup", None)
    if startup is None:
        raise HarnessError(f"--startup: {args.policy} has no start-up batches the harness runs")
    print(f"engine:         {args.policy}")
    print(f"config:         {config.describe()}")
    print(f"capture sizes:  {list(sizes) or 'none'}")
    answer = startup(config, sizes)
    if "not_run" in answer:
        print(f"NOT RUN  start-up batches: {answer['not_run']}")
        return exit_status([Outcome.NOT_RUN])
    for b in answer["batches"]:
        reads = "" if b["attention"] else " (no attention metadata: no kernel reads these)"
        print(f"batch:          {b['purpose']}: seq_lens {b['seq_lens']}{reads}")
    if answer["encoder_len"] is not None:
        print(f"encoder keys:   {answer['encoder_len']} per request at capture and warm-up "
              f"({answer['encoder_where']})")  # fmt: skip
    for line in answer["breaches"]:
        print(f"FAIL  {line} (lengths set at {answer['where']})")
    if answer["holds"]:
        print("OK    every length fits its row, every column read is inside it, only PAD slots are written")
    return exit_status([Outcome.HOLDS if answer["holds"] else Outcome.FAILS])
