"""The ``crossattn-sizing`` console script.

User errors (an invalid config, a policy path that does not import, a missing
GPU) are :class:`~crossattn_sizing.errors.HarnessError`; they print one line
naming the problem and exit 2. Anything else is a bug in the harness and keeps
its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from crossattn_sizing import commands
from crossattn_sizing.errors import HarnessError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crossattn-sizing",
        description="Verify that paged KV-cache block tables cover every encoder token.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except HarnessError as exc:
        print(f"crossattn-sizing: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("crossattn-sizing: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
