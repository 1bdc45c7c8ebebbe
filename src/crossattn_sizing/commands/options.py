"""The options several commands take, each declared once: flag, metavar, parser, help and rule.

An option means one thing wherever it is typed: ``--seed 18446744073709551616``
is refused with the same line by ``verify``, ``fuzz`` and ``reproduce``, and
``--policy`` names a policy the same way whether a command takes one or many.
So each shared option is one :class:`Option` here, and a command adds it with
:meth:`Option.add`, saying only what differs by command: its default, whether
it is required, and whether it may be repeated (each value is then parsed
alone, as the single-value form parses it).

An option that stands for a ``CROSSATTN_*`` variable names it (:attr:`Option.variable`):
one precedence rule for every setting and every command (``docs/settings.md``). The
option as typed beats the variable, which beats the command's default. argparse's own
default is None ("not typed"); :func:`settle` fills what was not typed, after the
command line and the environment are checked, and records where each value came from.

A value is parsed and checked while the command line is read: a bad one is an
:class:`~crossattn_sizing.base.errors.OptionError` (``--OPTION VALUE: rule``), which
the CLI prints as one line with exit 2. Options whose value names something
that must be loaded (a policy, an implementation, a file) are checked where the
command loads it, as before: loading imports user code and may be slow.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossattn_sizing.base import settings
from crossattn_sizing.base.errors import HarnessError, OptionError
from crossattn_sizing.base.limits import MAX_BLOCK_SIZE, MAX_SEED, parse_int
from crossattn_sizing.base.once import OnceSwitch, refuse_repeat
from crossattn_sizing.base.settings import DEVICES
from crossattn_sizing.specs.resolve import Isolation

Parse = Callable[[str, str], Any]
"""``(option, text) -> value``, raising :class:`~crossattn_sizing.base.errors.OptionError` on bad text."""


def integer(minimum: int, maximum: int | None = None) -> Parse:
    """The parser of an integer option in ``[minimum, maximum]`` (digits bounded by :mod:`limits`)."""

    def parse(option: str, text: str) -> int:
        return parse_int(option, text, minimum, maximum)

    parse.__name__ = f"integer in [{minimum}, {'...' if maximum is None else maximum}]"
    return parse


class _ParsedValue(argparse.Action):
    """Stores (or appends) the option's parsed value; argparse's ``type=`` would turn our
    one-line :class:`OptionError` into its own "invalid value" message and lose the rule."""

    def __init__(self, *args: Any, parse: Parse, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.parse = parse

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        value = self.parse(self.option_strings[-1], values)
        super().__call__(parser, namespace, value, option_string)


class _Store(_ParsedValue, argparse._StoreAction):
    """A parsed single value, given once (checked before the value is parsed: the repeat is the error)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        refuse_repeat(self, namespace, values, option_string)
        value = self.parse(self.option_strings[-1], values)
        argparse._StoreAction.__call__(self, parser, namespace, value, option_string)


class _Append(_ParsedValue, argparse._AppendAction):
    pass


@dataclass(frozen=True)
class Option:
    """One shared option: what every command that takes it shows and accepts."""

    flag: str
    help: str
    metavar: str | None = None
    parse: Parse | None = None
    choices: tuple[str, ...] | None = None
    dest: str | None = None
    switch: bool = False  # a flag that takes no value: --flag, and --no-flag to override its variable
    variable: str | None = None
    """The ``CROSSATTN_*`` variable that stands for this option where it is not typed."""

    def add(
        self,
        parser: argparse.ArgumentParser,
        *,
        default: Any = None,
        shown_default: str | None = None,
        required: bool = False,
        repeatable: bool = False,
    ) -> argparse.Action:
        """Add this option to a command's parser; the help is :attr:`help`, then the shape and default.

        ``shown_default`` says the default in words where the parsed default
        (often None: "not given") does not. An option with a :attr:`variable`
        is parsed with no default; ``default`` (and ``required``) are applied by
        :func:`settle`, after the variable.
        """
        said = f"{self.help}; repeatable" if repeatable else self.help
        shown = shown_default if shown_default is not None else (None if default is None else str(default))
        if self.variable is not None:
            shown = self.variable if shown is None or required else f"{self.variable}, else {shown}"
            required_here = False
        else:
            required_here = required
        if shown is not None and not required_here:
            said += f" (default {shown})"
        kwargs: dict[str, Any] = {"default": None if self.variable else default, "required": required_here,
                                  "help": said}  # fmt: skip
        if self.switch:  # --flag / --no-flag: the option can say no where its variable says yes
            action = parser.add_argument(self.flag, action=OnceSwitch, default=None,
                                         help=said if self.variable else self.help)  # fmt: skip
        else:
            if self.metavar is not None:
                kwargs["metavar"] = self.metavar
            if self.dest is not None:
                kwargs["dest"] = self.dest
            if self.choices is not None:
                kwargs["choices"] = self.choices
            if self.parse is not None:
                kwargs["parse"] = self.parse
                action = parser.add_argument(self.flag, action=_Append if repeatable else _Store, **kwargs)
            else:
                action = parser.add_argument(self.flag, action="append" if repeatable else "store", **kwargs)
        action.shared = self  # type: ignore[attr-defined]  # read by tests/test_options.py and settle()
        action.fallback = default  # type: ignore[attr-defined]  # the command's default, after the variable
        action.required_setting = required_here != required  # type: ignore[attr-defined]
        return action


POLICY = Option(
    "--policy", "sizing policy: a built-in name or module:attr", metavar="POLICY",
    variable=settings.SIZING_POLICY,
)  # fmt: skip
IMPL = Option(
    "--impl",
    "implementation: torch, triton, module:attr, or a vLLM release's own kernels (vllm, vllm==X, vllm@PATH)",
    metavar="IMPL", variable=settings.IMPL,
)  # fmt: skip
DEVICE = Option("--device", "device the implementation runs on", choices=DEVICES, variable=settings.DEVICE)
PROFILE = Option(
    "--hypothesis-profile", "Hypothesis settings profile", choices=settings.PROFILES, dest="profile",
    variable=settings.PROFILE,
)  # fmt: skip
SEED = Option(
    "--seed", "seed of the run's random draws, 0..2**64-1: the same seed repeats the run",
    metavar="N", parse=integer(0, MAX_SEED),
)  # fmt: skip
SELECT = Option("-k", "only properties matching this pytest -k expression", metavar="EXPR", dest="select")
CONFIG = Option(
    "--config",
    "the config as JSON text or the path of a JSON file: a harness RunnerConfig (reproduce also takes "
    "a transformers config.json)",
    metavar="JSON",
)
ENGINE = Option(
    "--engine",
    "an engine's own code, NAME==X (a release) or NAME@PATH (a tree), the same in every command: vllm==X, "
    "vllm@PATH or vllm runs as --policy and --impl set to it (audit: PATH may also be an installed vllm "
    "package directory, read only); sglang==X, sglang@PATH answers in its own worker (verify, check, map, "
    "reproduce mllama-mixed-batch: its decode metadata builder under the read-side property); "
    "tensorrt_llm@PATH answers in its own worker (verify, check, reproduce whisper: its cross-pool sizing "
    "under the cross-pool capacity property). An option that does not apply to the engine is refused",
    metavar="ENGINE",
)
JOBS = Option(
    "--jobs", "processes running side by side (verify: for the shared run of several policies, or one "
    "policy's run of an engine's code split by test; the verdicts do not depend on it; fuzz: fuzzing "
    "processes sharing the example database, see --redis-url)",
    metavar="N", parse=integer(1),
)  # fmt: skip
CONTEXT_LEN = Option("--context-len", "with --engine sglang: the server's context length", metavar="N")
JSON = Option("--json", "also write the result as JSON to this file", metavar="FILE")
OUT = Option(
    "--out", "where the command writes: map, the picture (a .png or .svg file); report, the folder its "
    "Markdown and JSON files go into (created if missing)", metavar="PATH",
)  # fmt: skip
MARKDOWN = Option("--markdown", "also write the report as Markdown to this file", metavar="FILE")
BLOCK_SIZE = Option(
    "--block-size", "tokens per KV-cache block", metavar="N", parse=integer(1, MAX_BLOCK_SIZE),
)  # fmt: skip


def path(option: str, text: str) -> Path:
    """A path as typed (what it must be, a folder or a file to write, is checked where it is used)."""
    return Path(text)


def seconds(option: str, text: str) -> float:
    """A number of seconds, as the settings take one (``CROSSATTN_CALL_TIMEOUT`` has the same rule)."""
    value = settings.seconds(text)
    if value is None:
        raise OptionError(option, repr(text), settings.SECONDS_RULE)
    return value


CALL_TIMEOUT = Option(
    "--call-timeout",
    "seconds one call into a module:attr policy or implementation, or into an engine's own code "
    "(vllm==X, vllm@PATH, --engine), may take in its worker process; past it the worker is killed with "
    "everything it started and that case fails",
    metavar="S", parse=seconds, variable=settings.CALL_TIMEOUT,
)  # fmt: skip
IN_PROCESS = Option(
    "--in-process",
    "UNSAFE, for a debugger: run module:attr code inside the judge's own process, as before isolation "
    "(the report then says the verdict is not isolated); --no-in-process: in a worker",
    switch=True, variable=settings.IN_PROCESS,
)


def add_isolation(parser: argparse.ArgumentParser) -> None:
    """``--call-timeout`` and ``--in-process``: where a command runs the user's ``module:attr`` code."""
    timeout = settings.DEFAULT_CALL_TIMEOUT
    CALL_TIMEOUT.add(parser, default=timeout, shown_default=f"{timeout:g}")
    IN_PROCESS.add(parser, default=False, shown_default="no")


def isolation(args: argparse.Namespace) -> Isolation:
    """The options of :func:`add_isolation`, as :func:`settle` left them (typed, else their variable)."""
    return Isolation(bool(args.in_process), float(args.call_timeout))


def settle(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Give every option of ``parser`` that stands for a variable its value by the one rule: as typed,
    else its ``CROSSATTN_*`` variable, else the command's default (``docs/settings.md``).

    Called by the CLI once the command line and the environment are checked, so every command reads
    its options one way. ``args.settled`` records what decided each one (the flag, the variable or
    ``"default"``): ``reproduce --engine`` refuses a typed ``--policy`` but overrides the variable.
    """
    settled: dict[str, str] = {}
    for action in parser._actions:
        option = getattr(action, "shared", None)
        if option is None or option.variable is None:
            continue
        if getattr(args, action.dest, None) is not None:  # typed (argparse's default is None)
            settled[action.dest] = option.flag
            continue
        if settings.is_set(option.variable):
            value = settings.READERS[option.variable]()
            settled[action.dest] = option.variable
            if isinstance(action, argparse._AppendAction):
                value = [value]
        elif getattr(action, "required_setting", False):
            raise HarnessError(f"the following arguments are required: {option.flag} (or {option.variable})")
        else:
            value, settled[action.dest] = getattr(action, "fallback", None), "default"
        setattr(args, action.dest, value)
    args.settled = settled


def named_by_variable(args: argparse.Namespace | None, message: str) -> str:
    """An error about a value a ``CROSSATTN_*`` variable gave (not the command line) says so: the
    loader that refuses ``'nope'`` knows it as ``--policy``; the user set ``CROSSATTN_SIZING_POLICY``."""
    for dest, source in getattr(args, "settled", {}).items():
        value = getattr(args, dest, None)
        value = value[0] if isinstance(value, list) and len(value) == 1 else value
        named = source in settings.READERS and str(source) not in message  # not said twice
        if named and isinstance(value, str) and repr(value) in message:
            return f"{message} (the value of {source})"
    return message


def typed(args: argparse.Namespace, dest: str) -> bool:
    """Whether the option ``dest`` was typed on the command line (not its variable, not the default)."""
    return str(getattr(args, "settled", {}).get(dest, "")).startswith("-")
