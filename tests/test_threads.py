"""Torch threads when several of the harness's processes share the cores (crossattn_sizing.base.threads).

Why: two judge processes with torch's default threads on two cores made
verify take twice as long and twice the CPU (spin-waiting OpenMP threads);
each process now takes its share of the cores, and a number the user set
stands everywhere.
"""

from __future__ import annotations

import pytest
import torch

from crossattn_sizing.base import threads
from crossattn_sizing.engine.client import EngineWorker
from crossattn_sizing.engine.install import Release


@pytest.fixture
def four_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(threads.THREADS_VARIABLE, raising=False)
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)


@pytest.mark.usefixtures("four_cores")
@pytest.mark.parametrize(("processes", "each"), [(1, 4), (2, 2), (3, 1), (8, 1), (0, 4)])
def test_the_cores_are_split_between_the_processes(processes: int, each: int) -> None:
    assert threads.threads_each(processes) == each
    assert threads.child_environment(processes)[threads.THREADS_VARIABLE] == str(each)


def test_a_number_the_user_set_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(threads.THREADS_VARIABLE, "3")
    assert threads.threads_each(2) is None
    assert threads.child_environment(2)[threads.THREADS_VARIABLE] == "3"
    before = torch.get_num_threads()
    with threads.sharing_cores(2):
        assert torch.get_num_threads() == before


@pytest.mark.usefixtures("four_cores")
def test_this_process_takes_its_share_while_the_block_runs_and_gets_its_threads_back() -> None:
    before = torch.get_num_threads()
    try:
        with pytest.raises(KeyError), threads.sharing_cores(4):
            assert torch.get_num_threads() == 1
            raise KeyError("the block fails")
        assert torch.get_num_threads() == before
        with threads.sharing_cores(1):  # alone: nothing changes
            assert torch.get_num_threads() == before
    finally:
        torch.set_num_threads(before)


def test_a_cpu_engine_worker_runs_one_thread_unless_the_user_set_a_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(threads.THREADS_VARIABLE, raising=False)
    worker = EngineWorker(Release("0.25.0", []))
    assert worker.environment()[threads.THREADS_VARIABLE] == "1"
    monkeypatch.setenv(threads.THREADS_VARIABLE, "")  # empty names no number, as for the judges
    assert worker.environment()[threads.THREADS_VARIABLE] == "1"
    monkeypatch.setenv(threads.THREADS_VARIABLE, "2")
    assert worker.environment()[threads.THREADS_VARIABLE] == "2"
