"""docs/settings.md is the settings' one table, and every row of it holds.

The table is parsed here, not restated: for each row, the setting is observed
through its variable alone, then through its option typed over the variable
(docs/settings.md: option > variable > default, for every command). What a
command would run with is observed where the command itself settles it: the
namespace ``crossattn-sizing`` hands the command (:func:`cli.parse`, the same
call ``main`` makes), and, for the pytest plugin, what a harness run's test
sees (its options, its loaded Hypothesis profile, its regression files) in a
pytest process of its own. A variable no option stands for is observed through
its reader, the one function every command reads it with.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crossattn_sizing.base import settings
from crossattn_sizing.commands import cli

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "settings.md"
PLUGIN = "pytest"
"""How the table names the harness's pytest plugin in its commands column."""


def cells(line: str) -> list[str]:
    """A Markdown table row's cells, stripped of spaces and code quotes."""
    return [c.strip().strip("`") for c in line.strip().strip("|").split("|")]


def table() -> list[dict[str, str]]:
    """The rows of the document's one table, as {column: cell}."""
    lines = TABLE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| variable |"))
    header = cells(lines[start])
    assert header == ["variable", "option", "default", "commands"], header
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, cells(line), strict=True)))
    return rows


ROWS = table()
WITH_OPTION = [r for r in ROWS if r["option"] != "—"]


def commands(row: dict[str, str]) -> list[str]:
    return [c.strip() for c in row["commands"].split(",")]


def cli_commands() -> dict[str, Any]:
    """Each ``crossattn-sizing`` command's parser."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return dict(sub.choices)


def action(parser: Any, flag: str) -> Any | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


# A value for each variable and, typed over it, another for its option; then what each reads as.
VALUES: dict[str, tuple[str, list[str], Any, Any]] = {
    settings.PROFILE: ("dev", ["--hypothesis-profile", "nightly"], "dev", "nightly"),
    settings.SIZING_POLICY: ("mrv2-prefix", ["--policy", "v1"], "mrv2-prefix", "v1"),
    settings.IMPL: ("triton", ["--impl", "torch"], "triton", "torch"),
    settings.DEVICE: ("cuda", ["--device", "cpu"], "cuda", "cpu"),
    settings.CALL_TIMEOUT: ("7", ["--call-timeout", "9"], 7.0, 9.0),
    settings.IN_PROCESS: ("1", ["--no-in-process"], True, False),
    settings.DCP_BACKEND: ("gloo", ["--dcp-backend", "inprocess"], "gloo", "inprocess"),
    settings.DCP_TIMEOUT: ("7", ["--dcp-timeout", "9"], 7.0, 9.0),
    settings.DB: ("{tmp}/env-db", ["--db", "{tmp}/option-db"], "{tmp}/env-db", "{tmp}/option-db"),
    settings.REDIS_URL: ("redis://env:1/0", ["--redis-url", "redis://option:2/0"], "redis://env:1/0",
                         "redis://option:2/0"),
    settings.REGRESSIONS_DIR: ("{tmp}/env-reg", ["--regressions", "{tmp}/option-reg"], "{tmp}/env-reg",
                               "{tmp}/option-reg"),
    settings.RECORD_REGRESSIONS: ("1", ["--no-record-regressions"], True, False),
    settings.OFFLINE: ("1", ["--no-offline"], True, False),
}  # fmt: skip
ALONE: dict[str, tuple[str, Any]] = {
    settings.SHARED_DB: ("{tmp}/shared", "{tmp}/shared"),
    settings.PROPERTIES: (str(ROOT / "properties"), str(ROOT / "properties")),
    settings.ENGINE_CACHE: ("{tmp}/engine", "{tmp}/engine"),
    settings.ENGINE_WORKERS: ("3", 3),
    settings.ENGINE_EXAMPLES: ("3", 3),
    settings.FUZZ_WORKER: ("2", 2),
    settings.FLEET_PARENT: ("4242", 4242),
}
"""Variables no option stands for: a value, and what their reader reads it as."""

REQUIRED = {"map": ["--out", "m.png"], "prove": ["--policy", "mrv2"]}
"""What a command's line needs besides the option under test (parsed only: nothing is run)."""


def filled(value: Any, tmp: Path) -> Any:
    if isinstance(value, str):
        return value.replace("{tmp}", str(tmp))
    if isinstance(value, list):
        return [filled(v, tmp) for v in value]
    return value


def normal(value: Any) -> Any:
    """An observed value as the table's values are written: one policy of a list, a path as text."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return str(value) if isinstance(value, Path) else value


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """No CROSSATTN_* variable but those a check sets; the working folder a scratch one."""
    for name in settings.READERS:
        if name.startswith("CROSSATTN_"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def test_the_table_has_every_variable_once_with_a_value_to_try() -> None:
    variables = [r["variable"] for r in ROWS]
    assert len(variables) == len(set(variables)), "a variable has two rows"
    assert set(variables) == {v for v in settings.READERS if v.startswith("CROSSATTN_")}
    assert {r["variable"] for r in WITH_OPTION} == set(VALUES)
    assert {r["variable"] for r in ROWS if r["option"] == "—"} == set(ALONE)


@pytest.mark.parametrize("row", WITH_OPTION, ids=lambda r: r["variable"])
def test_every_command_taking_the_option_is_listed_and_declares_the_variable(row: dict[str, str]) -> None:
    """A command with the option must appear in the row, and its option must stand for the variable."""
    listed = commands(row)
    for name, parser in cli_commands().items():
        found = action(parser, row["option"])
        if found is None or getattr(found, "shared", None) is None:
            continue
        assert found.shared.variable == row["variable"], (name, row["option"])
        assert name in listed, f"{name} takes {row['option']} but the table does not list it"


def cli_pairs() -> list[tuple[str, str]]:
    parsers = cli_commands()
    return [(r["variable"], c) for r in WITH_OPTION for c in commands(r)
            if c in parsers and action(parsers[c], VALUES[r["variable"]][1][0]) is not None]  # fmt: skip


@pytest.mark.parametrize(("variable", "command"), cli_pairs())
def test_a_command_takes_the_variable_and_its_option_beats_it(
    variable: str, command: str, clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_text, option_argv, env_value, option_value = filled(VALUES[variable], clean_env)
    flag = option_argv[0]
    parser = cli_commands()[command]
    dest = action(parser, flag).dest
    extra = [] if flag in REQUIRED.get(command, []) else REQUIRED.get(command, [])
    monkeypatch.setenv(variable, env_text)
    alone = cli.parse([command, *extra])
    assert normal(getattr(alone, dest)) == env_value, f"{command} ignores {variable}"
    assert alone.settled[dest] == variable
    over = cli.parse([command, *extra, *option_argv])
    assert normal(getattr(over, dest)) == option_value, f"{command}: {variable} beats {flag}"
    assert over.settled[dest] in action(parser, flag).option_strings


@pytest.mark.parametrize("variable", sorted(ALONE))
def test_a_variable_without_an_option_is_read_by_its_reader(
    variable: str, clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text, value = filled(ALONE[variable], clean_env)
    unset = settings.READERS[variable]()
    monkeypatch.setenv(variable, text)
    assert normal(settings.READERS[variable]()) == value != normal(unset)


# The plugin, in a pytest process of its own (profiles are global state) -----------------------
PROBE = '''
import json, os
from pathlib import Path
from hypothesis import settings

def test_probe(request, sizing_regressions):
    option = request.config.getoption
    seen = {name: option(name) for name in
            ("sizing_policy", "impl", "device", "dcp_backend", "dcp_timeout", "call_timeout", "in_process")}
    seen["profile"] = settings.get_current_profile_name().split("[")[0]
    seen["regressions"] = str(sizing_regressions.folder_or(Path("unset")))
    seen["record_regressions"] = sizing_regressions.recording()
    Path(os.environ["PROBE_OUT"]).write_text(json.dumps(seen))
'''
PLUGIN_SEES = {
    "--hypothesis-profile": "profile", "--policy": "sizing_policy", "--impl": "impl", "--device": "device",
    "--dcp-backend": "dcp_backend", "--dcp-timeout": "dcp_timeout", "--call-timeout": "call_timeout",
    "--no-in-process": "in_process", "--regressions": "regressions",
    "--no-record-regressions": "record_regressions",
}  # fmt: skip
"""What the probe reports for each plugin option (the flag typed over the variable)."""


def plugin_rows() -> list[dict[str, str]]:
    """Rows whose option the plugin takes (the others it reads through the variable alone)."""
    return [r for r in WITH_OPTION if PLUGIN in commands(r) and VALUES[r["variable"]][1][0] in PLUGIN_SEES]


def without_option() -> list[tuple[str, str]]:
    """(variable, command) pairs where the command reads the variable but takes no option for it."""
    taking = set(cli_pairs()) | {(r["variable"], PLUGIN) for r in plugin_rows()}
    return [(r["variable"], c) for r in WITH_OPTION for c in commands(r) if (r["variable"], c) not in taking]


@pytest.mark.parametrize(("variable", "command"), without_option())
def test_a_command_without_the_option_reads_the_variable_through_its_reader(
    variable: str, command: str, clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """E.g. verify and the plugin read ``CROSSATTN_DB`` through the profile's database: its reader."""
    env_text, _option_argv, env_value, _option_value = filled(VALUES[variable], clean_env)
    monkeypatch.setenv(variable, env_text)
    assert normal(settings.READERS[variable]()) == env_value


def probe(folder: Path, variables: dict[str, str], argv: list[str]) -> dict[str, Any]:
    """What a harness run's test sees under these variables and options."""
    (folder / "conftest.py").write_text("crossattn_sizing_harness = True\n")
    (folder / "test_probe.py").write_text(PROBE)
    out = folder / "seen.json"
    out.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSATTN_")}
    env.update(variables, PROBE_OUT=str(out))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(folder / "test_probe.py"), "-q", "-p", "no:cacheprovider",
         "--rootdir", str(folder), *argv],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0 and out.exists(), done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_the_plugin_takes_each_variable_and_each_option_beats_it(clean_env: Path) -> None:
    rows = plugin_rows()
    assert len(rows) == len(PLUGIN_SEES), "a plugin option the table does not list"
    values = {r["variable"]: filled(VALUES[r["variable"]], clean_env) for r in rows}
    # cuda without a GPU stops the run at start-up: its variable is tried alone below.
    variables = {v: text for v, (text, *_rest) in values.items() if v != settings.DEVICE}
    alone = probe(clean_env, variables, [])
    for variable, (_text, option_argv, env_value, _option_value) in values.items():
        if variable != settings.DEVICE:
            assert normal(alone[PLUGIN_SEES[option_argv[0]]]) == env_value, f"the plugin ignores {variable}"
    variables[settings.DEVICE] = values[settings.DEVICE][0]
    argv = [arg for (_text, option_argv, _env, _option) in values.values() for arg in option_argv]
    over = probe(clean_env, variables, argv)
    for variable, (_text, option_argv, _env_value, option_value) in values.items():
        assert normal(over[PLUGIN_SEES[option_argv[0]]]) == option_value, f"{variable} beats {option_argv[0]}"


@pytest.mark.slow
def test_the_plugin_takes_the_device_variable(clean_env: Path) -> None:
    """``CROSSATTN_DEVICE=cuda`` alone: the run is on cuda, or (no GPU here) stopped saying it needs one."""
    import torch

    (clean_env / "conftest.py").write_text("crossattn_sizing_harness = True\n")
    (clean_env / "test_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSATTN_")}
    env.update({settings.DEVICE: "cuda", "PROBE_OUT": str(clean_env / "seen.json")})
    done = subprocess.run([sys.executable, "-m", "pytest", "test_probe.py", "-q", "-p", "no:cacheprovider"],
                          cwd=clean_env, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    if torch.cuda.is_available():
        assert json.loads((clean_env / "seen.json").read_text())["device"] == "cuda"
    else:
        said = done.stdout + done.stderr
        assert done.returncode == 4 and "--device cuda: no CUDA device is available" in said, said
