"""The one registry of child processes: what is still registered at exit ends, newest first."""

from __future__ import annotations

import subprocess
import sys

import pytest

from crossattn_sizing.base import processes


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> dict:
    """An empty registry for one test, so the session's own children are not ended by it."""
    fresh: dict = {}
    monkeypatch.setattr(processes, "_CHILDREN", fresh)
    return fresh


def test_children_end_newest_first_and_forgotten_ones_not_at_all(registry: dict) -> None:
    ended: list[str] = []

    class Child:
        def __init__(self, name: str) -> None:
            self.name = name

        def end(self) -> None:
            ended.append(self.name)

    old, gone, new = Child("old"), Child("gone"), Child("new")
    for child in (old, gone, new):
        processes.register_child(child.end)
    processes.forget_child(gone.end)
    processes.end_children()
    assert ended == ["new", "old"] and not registry


def test_ending_one_kind_leaves_the_others_registered(registry: dict) -> None:
    """What the DCP pools' close_all does at a session's end: only the ranks end, newest first."""
    ended: list[str] = []
    for name, kind in (("server", ""), ("rank0", "dcp ranks"), ("worker", "engine"), ("rank1", "dcp ranks")):
        processes.register_child(lambda name=name: ended.append(name), kind=kind)
    processes.end_children("dcp ranks")
    assert ended == ["rank1", "rank0"]
    assert sorted(registry.values()) == ["", "engine"]
    processes.end_children()
    assert ended == ["rank1", "rank0", "worker", "server"] and not registry


def test_one_child_failing_to_end_does_not_keep_the_others(
    registry: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    ended: list[str] = []

    def broken() -> None:
        raise OSError("no such group")

    processes.register_child(lambda: ended.append("first"))
    processes.register_child(broken)
    processes.end_children()
    assert ended == ["first"]
    assert "no such group" in capsys.readouterr().err


def test_the_exit_handler_ends_what_is_left() -> None:
    """A real interpreter exit: the registered child's process group is gone afterwards."""
    code = (
        "import subprocess, sys\n"
        "from crossattn_sizing.base.processes import end_group, register_child\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
        "                     start_new_session=True)\n"
        "register_child(lambda: end_group(p, grace_s=5))\n"
        "print(p.pid, flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=True)
    assert not processes.alive(int(done.stdout))
