"""``map --engine sglang==X``: SGLang's read-side plane (findings/sglang_map.py) and its command."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossattn_sizing.commands.cli import main
from crossattn_sizing.findings.sglang_map import FITS, INADMISSIBLE, OVERFLOW, cell, plane
from tests.sglang_tree import SPEC


def test_cells_follow_the_gather_and_admission() -> None:
    assert cell(8192, 6404, 3001) == OVERFLOW  # issue 28: 6404 + 3001 > 8196
    assert cell(8192, 6404, 1001) == FITS
    assert cell(8192, 6404, 1792) == FITS and cell(8192, 6404, 1793) == OVERFLOW  # 6404 + 1792 = 8196
    assert cell(8192, 8186, 10) == INADMISSIBLE  # E + 1 >= max_req_input_len 8186


def test_plane_has_all_three_regions() -> None:
    grid = plane(512, steps=40)
    assert {INADMISSIBLE, OVERFLOW, FITS} <= set(grid.flatten().tolist())


def test_map_command_draws_and_judges_the_issue_batch(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib", reason="the 'map' extra is not installed")
    pytest.importorskip("transformers", reason="the 'hf' extra is not installed")
    out = tmp_path / "sglang.png"
    assert main(["map", "--engine", SPEC, "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000
    assert f"Mllama 4 tiles + 3000-token text: {SPEC} fails" in capsys.readouterr().out


def test_map_without_policy_or_engine_is_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["map", "--out", str(tmp_path / "x.png")]) == 2
    assert "the following arguments are required: --policy" in capsys.readouterr().err
