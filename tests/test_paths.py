"""Paths that would block or mislead are refused before anything opens them; outputs land where asked;
offline means offline in every command that can fetch a release.

FIFOs, devices, symbolic link loops and unreadable files are made here (as
root, permission bits do not stop a read, so "unreadable" is the check's
answer being forced). Where a test says a path was never opened, it makes
opening one fail the test instead of waiting on a clock.
"""

from __future__ import annotations

import os
import pathlib
from pathlib import Path

import pytest

from crossattn_sizing.base import pathkinds
from crossattn_sizing.base.errors import ConfigError, OptionError, ReleaseUnavailable
from crossattn_sizing.base.jsoninput import read_json_file, read_json_option
from crossattn_sizing.commands.cli import main
from crossattn_sizing.runs.outputs import output_dir, output_file
from tests.bad_input_cases import NEMOTRON, SMALL_DOMAIN


@pytest.fixture
def kinds(tmp_path: Path) -> dict[str, Path]:
    """One path of each kind: a regular file, a FIFO, a link to a device, a link loop, a folder."""
    regular = tmp_path / "regular.json"
    regular.write_text("{}")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    device = tmp_path / "zero.json"
    device.symlink_to("/dev/zero")
    loop = tmp_path / "loop.json"
    loop.symlink_to(tmp_path / "loop-back.json")
    (tmp_path / "loop-back.json").symlink_to(loop)
    folder = tmp_path / "folder"
    folder.mkdir()
    return {"regular": regular, "fifo": fifo, "device": device, "loop": loop, "folder": folder}


def test_each_kind_of_input_file_is_named(kinds: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    assert pathkinds.input_file_problem(kinds["regular"]) is None
    assert "a FIFO" in (pathkinds.input_file_problem(kinds["fifo"]) or "")
    assert "a character device" in (pathkinds.input_file_problem(kinds["device"]) or "")
    assert pathkinds.input_file_problem(kinds["loop"]) == "is a symbolic link loop"
    assert pathkinds.input_file_problem(kinds["folder"]) == "is a folder, not a file"
    assert pathkinds.input_file_problem(kinds["folder"] / "missing") == "does not exist"
    monkeypatch.setattr(os, "access", lambda *a, **k: False)  # what a non-root user meets on mode 000
    assert pathkinds.input_file_problem(kinds["regular"]) == "cannot be read (permission denied)"
    assert pathkinds.input_folder_problem(kinds["folder"]) == "cannot be read (permission denied)"


def test_each_kind_of_folder_and_output_is_named(kinds: dict[str, Path]) -> None:
    assert pathkinds.input_folder_problem(kinds["folder"]) is None
    assert pathkinds.input_folder_problem(kinds["loop"]) == "is a symbolic link loop"
    assert pathkinds.input_folder_problem(kinds["device"]) == "is a character device, not a folder"
    assert pathkinds.input_folder_problem(kinds["regular"]) == "is a file, not a folder"
    assert pathkinds.output_file_problem(kinds["regular"]) is None
    assert pathkinds.output_file_problem(kinds["folder"] / "new.json") is None
    assert "a FIFO" in (pathkinds.output_file_problem(kinds["fifo"]) or "")
    assert "a character device" in (pathkinds.output_file_problem("/dev/null") or "")
    assert pathkinds.output_file_problem(kinds["loop"]) == "is a symbolic link loop"


@pytest.fixture
def no_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening any path through pathlib fails the test: a refusal must come before the open."""

    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise AssertionError(f"{self} was opened")

    monkeypatch.setattr(pathlib.Path, "open", refuse)


@pytest.mark.parametrize("kind", ["fifo", "device", "loop", "folder"])
def test_a_json_file_of_the_wrong_kind_is_refused_unopened(
    kinds: dict[str, Path], kind: str, no_open: None
) -> None:
    with pytest.raises(ConfigError, match="regression file") as caught:
        read_json_file("regression file", kinds[kind])
    assert pathkinds.input_file_problem(kinds[kind]) in str(caught.value)


@pytest.mark.parametrize("kind", ["fifo", "device", "loop"])
def test_a_config_option_naming_a_special_file_says_what_it_is(
    kinds: dict[str, Path], kind: str, no_open: None
) -> None:
    with pytest.raises(ConfigError) as caught:
        read_json_option("--config", str(kinds[kind]))
    assert pathkinds.input_file_problem(kinds[kind]) in str(caught.value)


@pytest.mark.parametrize("kind", ["fifo", "device", "loop"])
def test_an_output_file_of_the_wrong_kind_is_refused_unopened(
    kinds: dict[str, Path], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    real_open = builtins.open

    def guarded(file: object, *args: object, **kwargs: object) -> object:
        if str(file) == str(kinds[kind]):
            raise AssertionError(f"{file} was opened")
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(builtins, "open", guarded)
    with pytest.raises(OptionError, match="--json"):
        output_file("--json", kinds[kind])


def test_outputs_are_absolute_when_the_command_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert output_file("--json", "r.json") == tmp_path / "r.json"
    assert output_dir("--db", "db") == tmp_path / "db"


def test_engine_tree_of_the_wrong_kind_is_an_engine_error(kinds: dict[str, Path]) -> None:
    from crossattn_sizing.engine.specs import tree_root

    for kind, said in (("loop", "symbolic link loop"), ("device", "character device"), ("fifo", "FIFO")):
        with pytest.raises(ReleaseUnavailable, match=said):
            tree_root(f"vllm@{kinds[kind]}")


def test_an_unreadable_regressions_folder_is_refused_not_read_as_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from properties import regressions

    monkeypatch.setenv("CROSSATTN_REGRESSIONS_DIR", str(tmp_path))
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, m, **k: False if Path(p) == tmp_path else real_access(p, m, **k)
    )
    with pytest.raises(ConfigError, match=r"regressions folder .*: cannot be read"):
        regressions.pinned_cases()


CHDIR_TO = "CROSSATTN_TEST_CHDIR_TO"


def chdirs(config: object) -> tuple[int, ...]:
    """A policy that moves the process's working directory every time it is asked (then answers as mrv2)."""
    from crossattn_sizing.core.policies import BUILTIN_POLICIES

    os.chdir(os.environ[CHDIR_TO])
    return BUILTIN_POLICIES["mrv2"](config)  # type: ignore[arg-type]


def test_a_policy_that_changes_directory_does_not_move_the_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv(CHDIR_TO, str(elsewhere))
    code = main(["prove", "--policy", "tests.test_paths:chdirs", "--json", "rel.json", *SMALL_DOMAIN])
    err = capsys.readouterr().err
    assert code == 0, err
    assert (here / "rel.json").is_file() and not (elsewhere / "rel.json").exists()
    assert f"wrote {here / 'rel.json'}" in err


FETCHING = [
    ("audit", "--engine", "vllm==0.25.0", "--read-only"),
    ("check", "--config", NEMOTRON, "--encoder-len", "3329", "--policy", "vllm==0.25.0"),
    ("reproduce", "whisper", "--engine", "vllm==0.25.0"),
    ("verify", "--impl", "vllm==0.25.0", "--policy", "mrv2"),
]  # fmt: skip


@pytest.mark.parametrize("argv", FETCHING, ids=[a[0] for a in FETCHING])
def test_offline_never_downloads(
    argv: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """CROSSATTN_OFFLINE=1 with an empty cache: refused naming the variable; a download fails the test."""
    from crossattn_sizing.releases import sources

    def download(version: str, cache: Path, *_: object) -> None:
        raise AssertionError(f"downloaded vllm {version} though offline")

    monkeypatch.setattr(sources, "pip_download", download)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("CROSSATTN_ENGINE_CACHE", raising=False)
    monkeypatch.setenv("CROSSATTN_OFFLINE", "1")
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == 2, err
    assert "vllm==0.25.0 is not in the wheel cache" in err and "(CROSSATTN_OFFLINE=1)" in err, err


def test_an_unwritable_engine_cache_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """HOME=/proc: the cache cannot be made. One line naming it, exit 2 (a traceback and 1 before)."""
    monkeypatch.setenv("HOME", "/proc")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("CROSSATTN_ENGINE_CACHE", raising=False)
    code = main(["reproduce", "whisper", "--engine", "vllm==0.25.0"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "the engine cache /proc/.cache/crossattn-sizing/engine cannot be written" in err
