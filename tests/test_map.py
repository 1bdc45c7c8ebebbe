"""``crossattn-sizing map`` and verify's Markdown maps: the plane's numbers, the files, and bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from crossattn_sizing.commands.cli import main
from crossattn_sizing.core import known_configs
from crossattn_sizing.core.policies import BUILTIN_POLICIES
from crossattn_sizing.findings.capacity_map import MARKERS, axis, covers, plane

pytest.importorskip("matplotlib", reason="the 'map' extra (matplotlib) is not installed")


def test_the_fix_covers_the_whole_plane_and_the_prefix_overflows_above_the_diagonal() -> None:
    values = axis(24)
    fixed = plane(BUILTIN_POLICIES["mrv2"], 16, 24)
    prefix = plane(BUILTIN_POLICIES["mrv2-prefix"], 16, 24)
    assert fixed.all()
    for i, e in enumerate(values):
        for j, m in enumerate(values):
            if e <= m:  # the row is sized for M >= e: covered
                assert prefix[i, j]
    assert not prefix.all()
    top_left = prefix[-1, 0]  # the longest encoder input at the shortest M
    assert not top_left


def test_markers_are_judged_with_their_own_config() -> None:
    by_label = {m.label: m for m in MARKERS}
    nemotron = by_label["Nemotron-Parse page, M=2048"]
    assert nemotron.encoder_len == known_configs.NEMOTRON_PAGE_TOKENS
    assert not covers(BUILTIN_POLICIES["mrv2-prefix"], nemotron.config, nemotron.encoder_len)
    assert covers(BUILTIN_POLICIES["mrv2"], nemotron.config, nemotron.encoder_len)
    whisper = by_label["Whisper (S=1500)"]
    assert covers(BUILTIN_POLICIES["mrv2-prefix"], whisper.config, whisper.encoder_len)


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_map_writes_the_picture(tmp_path: Path, suffix: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "deep" / f"map{suffix}"
    assert main(["map", "--policy", "mrv2-prefix", "--policy", "mrv2", "--out", str(out)]) == 0
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in data[:2000]
    assert "wrote" in capsys.readouterr().out


BAD = [
    (["--policy", "mrv2", "--out", "{tmp}/map.jpg"], "--out"),
    (["--policy", "nowhere:x", "--out", "{tmp}/map.png"], "nowhere"),
    (["--policy", "mrv2", "--block-size", "0", "--out", "{tmp}/map.png"], "--block-size"),
    (["--policy", "mrv2", "--block-size", "x", "--out", "{tmp}/map.png"], "--block-size"),
    (["--policy", "mrv2", "--out", "{tmp}/file.txt/map.png"], "--out"),
]


@pytest.mark.parametrize(("argv", "named"), BAD, ids=[b[1] + str(i) for i, b in enumerate(BAD)])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, argv: list[str], named: str) -> None:
    (tmp_path / "file.txt").write_text("a file, not a folder")
    args = [a.format(tmp=tmp_path) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "crossattn_sizing", "map", *args],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert named in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_no_matplotlib_is_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    assert main(["map", "--policy", "mrv2", "--out", str(tmp_path / "m.png")]) == 2
    err = capsys.readouterr().err
    assert "matplotlib" in err and len(err.strip().splitlines()) == 1


def test_verify_markdown_embeds_one_map_per_policy(tmp_path: Path) -> None:
    md = tmp_path / "report.md"
    proc = subprocess.run(
        [sys.executable, "-m", "crossattn_sizing", "verify", "--policy", "mrv2", "--policy", "mrv2-prefix",
         "-k", "test_capacity", "--max-examples", "20", "--markdown", str(md)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = md.read_text()
    for name in ("mrv2", "mrv2-prefix"):
        image = f"report-map-{name}.png"
        assert f"![capacity map of {name}]({image})" in text
        assert (tmp_path / image).read_bytes().startswith(b"\x89PNG")
    assert "| **verdict** | **holds** | **fails** |" in text
