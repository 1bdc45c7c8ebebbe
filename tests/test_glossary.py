"""The glossary of ``docs/spec.md`` §1 is what the command line takes.

Every CLI spelling its tables name is an option some parser defines (a
command's, or the pytest plugin's), and every refused old spelling it lists is
refused by that parser with one line naming the spelling to use instead.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from _pytest.config.argparsing import Parser

from crossattn_sizing.base.errors import RefusedSpelling
from crossattn_sizing.commands.cli import build_parser, main
from crossattn_sizing.runs import pytest_plugin

pytestmark = pytest.mark.filterwarnings("ignore:A private pytest class:pytest.PytestDeprecationWarning")
"""The plugin's options are read off pytest's own option parser, which pytest builds privately."""

SPEC = Path(__file__).resolve().parents[1] / "docs" / "spec.md"
PLUGIN = "pytest plugin"


def section_one() -> str:
    text = SPEC.read_text()
    return text[text.index("## §1") : text.index("## §2")]


def tables() -> list[list[dict[str, str]]]:
    """§1's Markdown tables, each a list of rows keyed by header."""
    found: list[list[dict[str, str]]] = []
    header: list[str] | None = None
    for line in section_one().splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            found.append([])
        elif not set("".join(cells)) <= set("- "):
            found[-1].append(dict(zip(header, cells, strict=True)))
    return found


def flags(cell: str) -> list[str]:
    return re.findall(r"`(--[a-z0-9-]+)`", cell)


def spelled(cell: str) -> list[str]:
    """The spellings a cell names, each with its value where it has one (``--engine vllm==X``)."""
    return re.findall(r"`(--[a-z0-9-]+(?: [^`]+)?)`", cell)


def plugin_parser() -> Parser:
    parser = Parser(processopt=None)
    pytest_plugin.pytest_addoption(parser)
    return parser


def defined() -> dict[str, set[str]]:
    """Where each flag is an option (not a refused spelling): command names, or the pytest plugin."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out: dict[str, set[str]] = {}
    for command, p in sub.choices.items():
        for action in p._actions:
            if not isinstance(action, RefusedSpelling):
                for flag in action.option_strings:
                    out.setdefault(flag, set()).add(command)
    for option in plugin_parser().getgroup("crossattn-sizing").options:
        if option.attrs().get("help") != argparse.SUPPRESS:
            for flag in option.names():
                out.setdefault(flag, set()).add(PLUGIN)
    return out


GLOSSARY = [row for table in tables() for row in table if "CLI spelling" in row]
REFUSED = [row for table in tables() for row in table if "refused" in row]


def test_the_glossary_has_its_rows() -> None:
    symbols = {row["symbol"] for row in GLOSSARY if "symbol" in row}
    assert {"`bs`", "`kbs`", "`C`", "`I`", "`M`", "`B`", "`E`", "`S`", "`W`"} <= symbols
    assert len(REFUSED) >= 5


@pytest.mark.parametrize("row", GLOSSARY, ids=lambda r: r.get("symbol") or r["term"])
def test_each_cli_spelling_is_an_option(row: dict[str, str]) -> None:
    cell = row["CLI spelling"]
    assert flags(cell) or cell == "—", row
    where = defined()
    for flag in flags(cell):
        assert flag in where, f"{flag} is in the glossary but no parser defines it"


def test_no_option_is_also_refused_where_it_is_defined() -> None:
    where = defined()
    for row in REFUSED:
        (old,) = flags(row["refused"])
        place = row["where"].strip("`")
        assert place not in where.get(old, set()), f"{old} is refused by {place} but also defined there"


@pytest.mark.parametrize("row", REFUSED, ids=lambda r: f"{r['where']} {r['refused']}".replace("`", ""))
def test_each_old_spelling_is_refused_naming_the_new_one(
    row: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    (old,) = flags(row["refused"])
    (new,) = spelled(row["use instead"])
    place = row["where"].strip("`")
    says = f"{old} is no longer an option: use {new}"
    if place == PLUGIN:
        with pytest.raises(pytest.UsageError, match=re.escape(says)):
            plugin_parser().parse([old, "x"])
        return
    assert new.split()[0] in defined(), f"{new} is not an option of any command"
    with pytest.raises(SystemExit) as exit_:
        main([place, old, "1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == f"crossattn-sizing {place}: error: {says} (see --help)\n"
