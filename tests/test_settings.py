"""Environment variables, parsing limits, output paths: each refused in one line naming what was typed.

The bad-input table (``tests/bad_input_cases.py``) runs these through the
commands and the plugin; here the rules are pinned at the functions, with
the values next to the edge each must fall on.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crossattn_sizing.base import settings
from crossattn_sizing.base.errors import MAX_LINE, ConfigError, HarnessError, OptionError, bounded, shown
from crossattn_sizing.base.jsoninput import parse_json_object
from crossattn_sizing.commands import cli
from crossattn_sizing.runs.outputs import check_outputs

SRC = Path(settings.__file__).parents[1]  # the package: settings sits in base/


def test_every_crossattn_variable_is_read_in_the_settings_module_only() -> None:
    """A read elsewhere would bypass the checks: names are written there and nowhere else."""
    found = set()
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        names = set(re.findall(r'"(CROSSATTN_[A-Z_]+)"', text))
        if path.name != "settings.py":
            assert not names, f"{path.relative_to(SRC)} names {sorted(names)}: read it through settings"
        found |= names
    assert found == set(settings.READERS) - {"XDG_CACHE_HOME", settings.HYPOTHESIS_STORAGE}


# Values refused by the same rule are listed under it once.
BAD_VARIABLES = [
    (settings.PROFILE, "nope", "unknown Hypothesis profile"),
    *((settings.DCP_TIMEOUT, v, "must be a number of seconds")
      for v in ("abc", "nan", "-1", "1e999", "9" * 5000)),
    *((name, "/dev/null", "is not a folder") for name in (
        settings.DB, settings.SHARED_DB, settings.REGRESSIONS_DIR, settings.PROPERTIES, "XDG_CACHE_HOME",
        settings.HYPOTHESIS_STORAGE,
    )),
    (settings.ENGINE_CACHE, "/dev/null/engine", "/dev/null is a file, not a folder"),
    (settings.DEVICE, "tpu", "use one of cpu, cuda"),
    (settings.DCP_BACKEND, "mpi", "use one of inprocess, gloo, nccl"),
    *((name, v, "must be 1 or 0")
      for name, v in ((settings.OFFLINE, "maybe"), (settings.RECORD_REGRESSIONS, "2"))),
    *((settings.ENGINE_WORKERS, v, "must be a positive integer") for v in ("0", "9" * 5000)),
    (settings.ENGINE_WORKERS, "100000", "at most 256"),
    (settings.FUZZ_WORKER, "-1", "must be an integer >= 0"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "value", "rule"), BAD_VARIABLES)
def test_a_bad_variable_is_one_line_naming_it(
    name: str, value: str, rule: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(settings.SettingError) as info:
        settings.check_environment()
    message = str(info.value)
    assert message.startswith(f"{name}=") and rule in message
    assert "\n" not in message and len(message) < 300


def test_good_and_blank_values_read_as_their_option(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in settings.READERS:
        monkeypatch.delenv(name, raising=False)
    settings.check_environment()
    assert (settings.profile(), settings.device(), settings.dcp_timeout()) == ("dev", "cpu", 120.0)
    assert settings.offline() is False and settings.engine_workers() is None
    monkeypatch.setenv(settings.DCP_TIMEOUT, " 2.5 ")
    monkeypatch.setenv(settings.OFFLINE, "yes")
    monkeypatch.setenv(settings.PROFILE, "")  # blank: unset, as in a shell
    monkeypatch.setenv(settings.DB, str(tmp_path / "new" / "db"))  # need not exist yet
    settings.check_environment()
    assert settings.dcp_timeout() == 2.5 and settings.offline() is True and settings.profile() == "dev"
    assert settings.database_dir(Path("x")) == tmp_path / "new" / "db"


def test_caches_follow_xdg_and_a_named_wheel_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(settings.ENGINE_CACHE, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert settings.wheel_cache() == tmp_path / "xdg" / "crossattn-sizing" / "wheels"
    assert settings.engine_cache() == tmp_path / "xdg" / "crossattn-sizing" / "engine"
    # audit --cache-dir keeps the unpacked release inside the cache the user named
    assert settings.engine_cache(tmp_path / "wheels") == tmp_path / "wheels" / "engine"
    monkeypatch.setenv(settings.ENGINE_CACHE, str(tmp_path / "mine"))
    assert settings.engine_cache(tmp_path / "wheels") == tmp_path / "mine"


def test_the_release_is_looked_for_in_the_named_wheel_cache_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from crossattn_sizing.engine.install import resolve_release

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with pytest.raises(HarnessError) as info:
        resolve_release("vllm==0.25.0", offline=True, wheel_cache=tmp_path / "wheels")
    assert f"not in the wheel cache {tmp_path / 'wheels'} (--offline)" in str(info.value)
    assert not (tmp_path / "home").exists() and not (tmp_path / "xdg").exists()
    monkeypatch.setenv(settings.OFFLINE, "1")
    with pytest.raises(HarnessError, match=r"\(CROSSATTN_OFFLINE=1\)"):  # named as the user set it
        resolve_release("vllm==0.25.0")


def test_json_refuses_duplicate_keys_at_any_depth_and_long_integers() -> None:
    with pytest.raises(ConfigError, match=r"--config: key='a': appears twice"):
        parse_json_object("--config", '{"a": 1, "a": 2}')
    with pytest.raises(ConfigError, match=r"key='kind': appears twice"):
        parse_json_object("--config", '{"groups": [{"kind": "full", "kind": "cross"}]}')
    with pytest.raises(ConfigError, match=r"at most 30 digits") as info:
        parse_json_object("--config", '{"a": ' + "1" * 100_000 + "}")
    assert len(str(info.value)) < 200
    text = '{"a": {"a": 1}, "b": ' + "9" * 30 + "}"  # the same key in two objects is fine
    assert parse_json_object("f", text) == {"a": {"a": 1}, "b": int("9" * 30)}


def test_values_and_lines_are_cut_to_a_bounded_length() -> None:
    assert len(shown("x" * 50_000_000)) < 120 and "(50000002 characters)" in shown("x" * 50_000_000)
    assert "digits" in shown(10**20000)  # repr() of such an int raises ValueError
    assert len(str(OptionError("--x", "y" * 10**6, "rule"))) < 150
    assert len(bounded("z" * 10**6)) <= MAX_LINE


def test_two_outputs_naming_one_file_are_refused(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(tmp_path)
    with pytest.raises(OptionError, match="names the same file as --json"):
        check_outputs({"--json": tmp_path / "r", "--junit-xml": tmp_path / "link" / "r"}, tmp_path / "regs")
    distinct = {"--json": tmp_path / "r", "--junit-xml": None, "--markdown": tmp_path / "m"}
    check_outputs(distinct, tmp_path / "regs")


def test_no_output_lies_in_the_regressions_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(OptionError, match="lies in the regressions folder"):
        check_outputs({"--json": tmp_path / "regs" / "sub" / "r.json"}, tmp_path / "regs")
    monkeypatch.setenv(settings.REGRESSIONS_DIR, str(tmp_path / "env-regs"))
    with pytest.raises(OptionError, match="lies in the regressions folder"):
        check_outputs({"--json": tmp_path / "env-regs" / "r.json"})


def test_a_runner_file_that_does_not_parse_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runner = tmp_path / "vllm" / "v1" / "worker" / "gpu"
    runner.mkdir(parents=True)
    (runner / "model_runner.py").write_text("class GPUModelRunner(:\n")
    code = cli.main(["audit", "--engine", f"vllm@{tmp_path / 'vllm'}", "--runner", "v2"])
    out = capsys.readouterr().out
    assert code == 3
    assert "model_runner.py is not valid Python (invalid syntax, line 1)" in out and "not found" not in out
