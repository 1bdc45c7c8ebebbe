"""Options given once: argparse actions that refuse a second occurrence of a single-value option.

argparse keeps the last of two values silently, so ``--seed 1 --seed 2`` would run with seed 2 and
nobody would know the first was dropped. Every command's parser registers these actions, and the
pytest plugin reads its own command line with them (pytest's parser cannot: it parses the command
line several times), so a repeat gets the same one line wherever it is typed.
"""

from __future__ import annotations

import argparse
from typing import Any

from crossattn_sizing.base.errors import HarnessError, shown_plain

GIVEN = "_options_given"
"""The namespace attribute where a parse notes each single-value option typed so far (dest -> how it was
typed); :class:`OneLineParser <crossattn_sizing.commands.cli.OneLineParser>` removes it after the parse."""


def refuse_repeat(action: argparse.Action, namespace: argparse.Namespace, values: Any,
                  option_string: str | None) -> None:  # fmt: skip
    """Refuse a second occurrence of an option that takes one value (or a switch and its ``--no-`` form).

    argparse keeps the last one silently: ``--engine vllm==0.24.0 --engine sglang@T`` would judge only the
    tree, and ``--seed 1 --seed 2`` run with seed 2. An option documented as repeatable appends instead and
    never comes here. Positionals are argparse's to count.
    """
    if not action.option_strings:
        return
    given: dict[str, tuple[str, str | None]] = namespace.__dict__.setdefault(GIVEN, {})
    flag = option_string or action.option_strings[-1]
    text = " ".join(map(str, values)) if isinstance(values, list) else values
    value = None if action.nargs == 0 else shown_plain(text)
    if action.dest not in given:
        given[action.dest] = (flag, value)
        return
    first_flag, first_value = given[action.dest]
    if value is not None and first_value is not None:
        rule = "it takes one value; give it once"
        raise HarnessError(f"{flag} given twice ({first_value}, then {value}): {rule}")
    if flag != first_flag:  # a switch and its --no- form
        raise HarnessError(f"{flag} given after {first_flag}: give one of them, once")
    raise HarnessError(f"{flag} given twice: give it once")


class _Once(argparse.Action):
    """An action that refuses to be given twice (:func:`refuse_repeat`); mixed into argparse's own."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        refuse_repeat(self, namespace, values, option_string)
        super().__call__(parser, namespace, values, option_string)


class _OnceStore(_Once, argparse._StoreAction):
    pass


class _OnceStoreConst(_Once, argparse._StoreConstAction):
    pass


class _OnceStoreTrue(_Once, argparse._StoreTrueAction):
    pass


class _OnceStoreFalse(_Once, argparse._StoreFalseAction):
    pass


class OnceSwitch(_Once, argparse.BooleanOptionalAction):
    """``--flag`` / ``--no-flag``: one of them, once (both share a destination)."""


ONCE_ACTIONS: dict[str | None, type[argparse.Action]] = {
    None: _OnceStore,
    "store": _OnceStore,
    "store_const": _OnceStoreConst,
    "store_true": _OnceStoreTrue,
    "store_false": _OnceStoreFalse,
}
"""argparse's single-value actions by their registered names, each refusing a repeat: a command parser
registers these (:class:`~crossattn_sizing.commands.cli.OneLineParser`), so every option any command adds
with ``action="store"`` (or none) is given once, shared option or its own."""
