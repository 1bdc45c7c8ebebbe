"""The ``crossattn-sizing`` console script.

User errors (an invalid config, a policy path that does not import, a missing
GPU, an unknown option) are :class:`~crossattn_sizing.base.errors.HarnessError` or
argparse errors; they print one line naming the option or field and the rule
and exit 2. Ctrl-C (SIGTERM, SIGHUP) exits 130 from every command, at any moment (see
:mod:`crossattn_sizing.base.interrupts`). Standard output that cannot be written (full, closed) is
exit 2 too, with one line on stderr (see :mod:`crossattn_sizing.base.standard_output`). Anything
else is a bug in the harness and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from crossattn_sizing import commands
from crossattn_sizing.base import interrupts, once, settings, standard_output
from crossattn_sizing.base.errors import HarnessError, bounded
from crossattn_sizing.base.processes import end_children
from crossattn_sizing.commands import options

PROG = "crossattn-sizing"


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``prog: error: ...``), exit 2, like every other
    bad input; ``--help`` still shows the full usage. An option that takes one value (and a switch) is
    refused when given twice, where argparse keeps the last silently (:data:`once.ONCE_ACTIONS`);
    one documented as repeatable appends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, action in once.ONCE_ACTIONS.items():
            self.register("action", name, action)

    def parse_known_args(  # type: ignore[override]  # the signature differs across Python versions
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """argparse's parse, less the note of which options were given (a parse's own bookkeeping)."""
        parsed, extras = super().parse_known_args(args, namespace)
        parsed.__dict__.pop(once.GIVEN, None)
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        """Bad usage as one bounded line and exit status 2, never the usage block."""
        self.exit(2, f"{self.prog}: error: {bounded(message)} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``crossattn-sizing`` parser: one subcommand per module under :mod:`crossattn_sizing.commands`."""
    parser = OneLineParser(
        prog=PROG,
        description="Verify that paged KV-cache block tables cover every encoder token.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    sub.required = True
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name in commands.SHARED:
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line as its command receives it: parsed, every ``CROSSATTN_*`` variable checked, and
    each option that stands for one settled by the one rule, option > variable > default
    (:func:`~crossattn_sizing.commands.options.settle`, ``docs/settings.md``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    settings.check_environment()  # a bad CROSSATTN_* variable is bad input, like a bad option
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options.settle(sub.choices[args.command], args)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command in-process and return its exit status (tests call this).

    The workers it started for the user's ``module:attr`` code end with it: a
    caller running many commands in one process keeps no idle workers between them.
    """
    with interrupts.handling():
        try:
            return _run(argv)
        finally:
            end_children("code")


def console_main() -> NoReturn:
    """The console script and ``python -m crossattn_sizing``: run, then leave with the status.

    Ctrl-C stays handled until the process is gone, so the status after a Ctrl-C
    is 130 whenever it lands (see :func:`crossattn_sizing.base.interrupts.leave`).
    """
    status = interrupts.EXIT_STATUS
    try:
        with interrupts.handling(restore=False):
            status = _run(None)
            interrupts.leaving()
    except KeyboardInterrupt:  # a press after the command returned, before leaving() took over
        interrupts.leaving()
        status = interrupts.EXIT_STATUS
    interrupts.leave(status)


def _run(argv: Sequence[str] | None) -> int:
    """The command's status, unless standard output could not be written (see :mod:`standard_output`)."""
    with standard_output.guarded() as out:
        status = _command(argv)
    if out.failure is None or status == interrupts.EXIT_STATUS:
        return status
    own = "" if status == standard_output.EXIT_STATUS else f" (the status would have been {status})"
    print(f"{PROG}: error: {standard_output.describe(out.failure)}; what was printed there is lost{own}",
          file=sys.stderr)  # fmt: skip
    return standard_output.EXIT_STATUS


def _command(argv: Sequence[str] | None) -> int:
    args = None
    try:
        args = parse(argv)
        status = int(args.func(args))
    except HarnessError as exc:
        print(f"{PROG}: error: {bounded(options.named_by_variable(args, str(exc)))}", file=sys.stderr)
        return interrupts.EXIT_STATUS if interrupts.requested() else 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return interrupts.EXIT_STATUS
    # A Ctrl-C the command absorbed (a swallowed KeyboardInterrupt, pytest's own handling)
    # still ends the run as interrupted.
    return interrupts.EXIT_STATUS if interrupts.requested() else status


if __name__ == "__main__":
    console_main()
