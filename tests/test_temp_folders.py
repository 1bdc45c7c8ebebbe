"""The harness's temporary folders go at the end of their block, and at exit when a Ctrl-C cut that short.

``verify`` once left a ``crossattn-verify-*`` folder in the suite's private
temp folder (tests/conftest.py caught it): its folders were plain
``tempfile.TemporaryDirectory`` blocks, whose removal an interruption can
cut short with nothing left to finish it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from crossattn_sizing.base import processes


def test_the_folder_stands_for_its_block_and_is_gone_after() -> None:
    with processes.temp_folder_while("crossattn-test-") as folder:
        assert folder.is_dir() and folder.name.startswith("crossattn-test-")
        (folder / "inner").mkdir()
        (folder / "inner" / "file").write_text("x")
    assert not folder.exists()
    assert folder not in processes._TEMP_FOLDERS


def test_a_removal_cut_short_stays_registered_for_the_exit_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    real = shutil.rmtree
    cut = {"done": False}

    def interrupted_once(path: Path, ignore_errors: bool = False) -> None:
        if not cut["done"]:
            cut["done"] = True
            raise KeyboardInterrupt  # Ctrl-C during the removal
        real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(processes.shutil, "rmtree", interrupted_once)
    with pytest.raises(KeyboardInterrupt), processes.temp_folder_while("crossattn-test-") as folder:
        (folder / "file").write_text("x")
    assert folder.exists()
    remove = processes._TEMP_FOLDERS[folder]  # what end_children runs at exit
    assert remove in processes._CHILDREN
    processes.forget_child(remove)
    remove()
    assert not folder.exists() and folder not in processes._TEMP_FOLDERS
