"""The harness's error types.

Every user-facing failure that is the user's input (a config, a policy path, a
device) is one of these, so the CLI and the pytest plugin can print a single
clear line and exit non-zero instead of a traceback from deep inside.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import Any

MAX_SHOWN = 80
"""Characters of a value an error line shows: a 50 MB string a user passed is not echoed whole."""


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    suffix = f"... ({len(text)} characters)"
    return text[: max(1, limit - len(suffix))] + suffix


def _int_text(value: int) -> str:
    try:
        return str(value)
    except ValueError:  # an int past sys.get_int_max_str_digits(): Python refuses to print it
        return f"<an integer of about {int(value.bit_length() * 0.30103) + 1} digits>"


def shown(value: object, limit: int = MAX_SHOWN) -> str:
    """``repr(value)`` cut to ``limit`` characters (the full length said), for one-line errors."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _cut(_int_text(value), limit)
    try:
        return _cut(repr(value), limit)
    except ValueError:  # a container holding an int too long to print
        return f"<a {type(value).__name__} too large to show>"


def shown_plain(value: object, limit: int = MAX_SHOWN) -> str:
    """Like :func:`shown`, but as ``str`` shows it: option values read as typed, paths without quotes."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _cut(_int_text(value), limit)
    return _cut(str(value), limit)


MAX_LINE = 1000
"""Characters of one error line: whatever a message quotes, the line stays readable."""


def bounded(message: str) -> str:
    """An error message cut to :data:`MAX_LINE` characters (the last safeguard; values are cut first)."""
    return _cut(message, MAX_LINE)


class HarnessError(Exception):
    """Base class of errors the CLI reports as one line with a non-zero exit."""


def described(exc: BaseException) -> str:
    """What raised, for a line a user reads: the harness's own errors by their message alone.

    The harness's classes (``ReleaseUnavailable``, ``SizingExecError``, ``WrongAnswer``, ...) are how
    its code tells errors apart, not words for users; their messages say what went wrong. Any other
    exception comes from the code under test, a library or Python itself, and its kind
    (``ZeroDivisionError``, ``AssertionError``) is part of what the user needs: ``Kind: message``.
    """
    text = str(exc).strip()
    if type(exc).__module__.split(".")[0] == __name__.split(".")[0]:  # one of ours
        return text or (type(exc).__doc__ or "an error of the harness").strip().splitlines()[0]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class ConfigError(HarnessError, ValueError):
    """A runner config that the engine would refuse at start-up.

    Carries the offending field, its value and the rule it breaks, so a message
    always reads ``field=value: rule``.
    """

    def __init__(self, field: str, value: object, rule: str) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        super().__init__(f"invalid config: {shown_plain(field, 400)}={shown(value)}: {rule}")


class PolicyLoadError(HarnessError, ValueError):
    """A sizing policy (or implementation) named by the user could not be loaded."""


class PolicyCallError(PolicyLoadError):
    """A user's sizing policy loaded but could not be called as a policy.

    It raised, takes no config argument, or returned something other than one
    non-negative int per KV-cache group. That is the user's input being wrong,
    not a property failing: the CLI reports it as one line and exit 2, and the
    property suite stops instead of shrinking it into a counterexample.
    """


class NotExpressible(HarnessError):
    """A policy cannot be asked about this config: the engine behind it has no way to represent it.

    An engine's own sizing (``vllm==X``) raises it for, say, a DCP-replicated
    group before the release had the field. No verdict either way: the
    properties discard such an example, ``prove`` counts the config as not
    judged, and a single ``check`` of it is bad input (exit 2).
    """


class JudgedFailure(AssertionError):
    """The code under test ran and was seen to fail: its process died, or it did not answer within the
    call deadline. A verdict ("fails") on that code, never bad input and never "not run".

    An ``AssertionError`` so a property reports it as its failing case; the
    harness's user-code boundary (:func:`crossattn_sizing.core.policies.checked_widths`)
    lets it through as it is, and ``check`` and ``prove`` judge the config
    fails. The engine's workers raise it (``engine.client.EngineCrash``); a
    ``module:attr`` policy's worker turns it into a :class:`PolicyCallError` first.
    """


class ReleaseUnavailable(HarnessError, RuntimeError):
    """An engine release's code could not be obtained, imported or run, for a reason the user must fix:
    an unknown version, a failed download, a wheel not in the cache when offline, an unusable path
    or tree. The one error for it, whether ``audit`` reads the release or the engine adapter runs it.

    Defined here, not in :mod:`crossattn_sizing.engine.install` or
    :mod:`crossattn_sizing.releases.sources`, so that naming an engine spec's mistake
    (:mod:`crossattn_sizing.engine.specs`) needs no module that installs releases.
    """


class OptionError(HarnessError, ValueError):
    """A command-line option (or plugin option) whose value breaks a rule: ``option value: rule``."""

    def __init__(self, option: str, value: object, rule: str) -> None:
        self.option = option
        self.value = value
        self.rule = rule
        super().__init__(f"{option} {shown_plain(value)}: {rule}")


class DeviceError(HarnessError, RuntimeError):
    """A device was required (``--device cuda``) but is not available."""


class CapacityError(HarnessError, IndexError):
    """A block-table access past a row, refused before any kernel runs (guarded mode).

    On a GPU the engine's unmasked loads and stores past a row silently read or
    overwrite another request's row (or memory past the tensor, which can kill
    the CUDA context), so the harness refuses the access on the host and says
    which group, row and token had no column. ``needed`` and ``width`` count row
    entries; ``first_position`` is the first token position without a column.
    ``access`` is ``"append"``, ``"lookup"`` (a column past the width) or
    ``"allocation"`` (past the modelled allocation, refused in every mode because
    the harness cannot model what lies there).
    """

    def __init__(
        self,
        group: int,
        row: int,
        needed: int,
        width: int,
        first_position: int,
        access: str = "lookup",
    ) -> None:
        self.group, self.row, self.needed = group, row, needed
        self.width, self.first_position, self.access = width, first_position, access
        where = {
            "append": "appending block ids",
            "lookup": "looking up a slot",
            "allocation": "reading or writing past the modelled allocation",
        }.get(access, access)
        super().__init__(
            f"capacity error {where}: group {group} row {row} needs {needed} entries but the "
            f"row holds {width}; token positions from {first_position} have no column"
        )

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Rebuilt from its fields, so it crosses a process boundary (a distributed DCP rank).
        return (type(self), (self.group, self.row, self.needed, self.width, self.first_position, self.access))


class RefusedSpelling(argparse.Action):
    """An old spelling of an option: typing it is a usage error naming the spelling to type instead."""

    def __init__(self, *args: Any, instead: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.instead = instead

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        """Stop the parse with the line naming the new spelling (argparse calls this on the old one)."""
        parser.error(f"{option_string} is no longer an option: use {self.instead}")


def refuse_spelling(add: Callable[..., Any], old: str, new: str) -> None:
    """Refuse ``old``, a retired spelling of ``new``, with one line naming ``new`` (no silent alias).

    ``add`` is the ``add_argument`` (argparse) or ``addoption`` (pytest) of the parser that
    took ``old``; the glossary of ``docs/spec.md`` §1 lists every refused spelling.
    """
    add(old, action=functools.partial(RefusedSpelling, instead=new), nargs="?", default=argparse.SUPPRESS,
        dest=f"refused{old.replace('-', '_')}", help=argparse.SUPPRESS)  # fmt: skip
