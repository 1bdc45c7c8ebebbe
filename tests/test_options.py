"""An option typed in two commands is one option: same parser, metavar, help and error line.

Read off the parsers the CLI builds, so a command that declares a shared
option its own way again (an ``int`` here, a string there) fails here.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import pytest

from crossattn_sizing.base.errors import RefusedSpelling
from crossattn_sizing.commands.cli import build_parser, main
from crossattn_sizing.commands.options import Option

LISTS = {("prove", flag) for flag in ("--dcp", "--max-model-len", "--encoder-budget", "--block-size")}
LISTS |= {("check", "--encoder-len")}
"""prove's domain axes: a LIST of N, LO-HI and LO-HI:STEP items (parsed by ``prove.Domain``), and
check's comma-separated encoder lengths: the same quantity over many values where reproduce takes
one; a shape of its own, not a disagreement."""


def actions_by_flag() -> dict[str, dict[str, argparse.Action]]:
    """Flag -> {command: its action}, for every option of every command."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out: dict[str, dict[str, argparse.Action]] = defaultdict(dict)
    for command, p in sub.choices.items():
        for action in p._actions:
            if isinstance(action, RefusedSpelling):  # an old spelling (test_glossary.py)
                continue
            for flag in action.option_strings:
                if flag not in ("-h", "--help") and (command, flag) not in LISTS:
                    out[flag][command] = action
    return out


SHARED = {flag: by for flag, by in actions_by_flag().items() if len(by) > 1}


def test_options_of_several_commands_are_found() -> None:
    assert {"--policy", "--seed", "--impl", "--device", "--json", "-k", "--block-size"} <= set(SHARED)


@pytest.mark.parametrize("flag", sorted(SHARED))
def test_every_command_takes_a_shared_option_as_declared_once(flag: str) -> None:
    by_command = SHARED[flag]
    options = {command: getattr(a, "shared", None) for command, a in by_command.items()}
    assert all(isinstance(o, Option) for o in options.values()), f"{flag} declared in place: {options}"
    assert len({id(o) for o in options.values()}) == 1, f"{flag} declared more than once"
    option = next(iter(options.values()))
    for command, action in by_command.items():
        assert action.type is None and getattr(action, "parse", None) is option.parse, command
        assert (action.metavar, action.choices) == (option.metavar, option.choices), command
        assert action.help is not None and action.help.startswith(option.help), command
        rest = action.help.removeprefix(option.help).removeprefix("; repeatable")
        assert rest == "" or rest.startswith(" (default "), (command, rest)


BAD = [
    ("--seed", "-1", "--seed -1: must be >= 0"),
    ("--seed", "x", "--seed 'x': must be an integer"),
    ("--block-size", "0", "--block-size 0: must be >= 1"),
    ("--block-size", str(2**20), "--block-size 1048576: must be <= 65536"),
]
REQUIRED = {"check": ["--config", "{}", "--encoder-len", "1"], "map": ["--policy", "mrv2", "--out", "m.png"],
            "prove": ["--policy", "mrv2"], "reproduce": ["whisper"]}  # fmt: skip


@pytest.mark.parametrize(("flag", "value", "says"), BAD)
def test_a_bad_value_gets_the_same_line_from_every_command(
    flag: str, value: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in SHARED[flag]:
        assert main([command, *REQUIRED.get(command, []), flag, value]) == 2, command
        err = capsys.readouterr().err
        assert err == f"crossattn-sizing: error: {says}\n", command


def single_value_options() -> list[tuple[str, str, argparse.Action]]:
    """(command, flag, action) for every option of every command that is not documented as repeatable."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for command, p in sub.choices.items():
        for action in p._actions:
            repeatable = isinstance(action, (argparse._AppendAction, argparse._CountAction))
            own = isinstance(action, (argparse._HelpAction, RefusedSpelling))  # --help; an old spelling
            if not action.option_strings or repeatable or own:
                continue
            out.append((command, action.option_strings[0], action))
    return out


SINGLE = single_value_options()
SINGLE_IDS = [f"{c} {f}" for c, f, _ in SINGLE]


def test_the_walk_finds_single_value_options_of_every_command() -> None:
    commands = {command for command, _, _ in SINGLE}
    assert {"verify", "check", "report", "reproduce", "map", "prove", "fuzz", "audit"} <= commands
    assert ("verify", "--engine") in {(c, f) for c, f, _ in SINGLE}


@pytest.mark.parametrize(("command", "flag"), [(c, f) for c, f, _ in SINGLE], ids=SINGLE_IDS)
def test_an_option_that_takes_one_value_is_refused_when_given_twice(
    command: str, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse keeps the last of two silently (``--engine A --engine B`` judged only B): refused, one line,
    exit 2, naming both values, before the command does anything (so any value that parses will do)."""
    action = next(a for c, f, a in SINGLE if (c, f) == (command, flag))
    if action.nargs == 0:  # a switch: --flag twice
        given = [flag, flag]
        says = f"{flag} given twice: give it once"
    else:
        first, second = (action.choices[0], action.choices[-1]) if action.choices else ("1", "2")
        given = [flag, str(first), f"{flag}={second}"]
        says = f"{flag} given twice ({first}, then {second}): it takes one value; give it once"
        if action.type is not None:  # shown as argparse converted it (--minutes 1 is 1.0)
            first, second = action.type(str(first)), action.type(str(second))
            says = f"{flag} given twice ({first}, then {second}): it takes one value; give it once"
    assert main([command, *given]) == 2
    err = capsys.readouterr().err
    assert err == f"crossattn-sizing: error: {says}\n"


def test_a_switch_and_its_negation_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--in-process", "--no-in-process"]) == 2
    assert capsys.readouterr().err == (
        "crossattn-sizing: error: --no-in-process given after --in-process: give one of them, once\n"
    )


def test_repeatable_options_still_repeat() -> None:
    parser = build_parser()
    args = parser.parse_args(["verify", "--policy", "mrv2", "--policy", "v1", "-k", "a", "-k", "b"])
    assert (args.policy, args.select) == (["mrv2", "v1"], ["a", "b"])
    assert not any(name.startswith("_options") for name in vars(args))  # the parse's note is not an option
