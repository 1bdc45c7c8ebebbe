"""``nox -s gpu`` counts the Triton kernels it compiled from the cache folder it gives Triton.

nox is not installed in the test environment (it runs the sessions from
outside them), so noxfile.py is loaded here with a stand-in ``nox`` module that
has what the file touches at import: ``nox.options`` and the ``@nox.session``
decorator. The counting reads a cache laid out as Triton 3.x writes it.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def noxfile(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    stand_in = types.ModuleType("nox")
    stand_in.options = types.SimpleNamespace()  # type: ignore[attr-defined]
    stand_in.session = lambda fn: fn  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nox", stand_in)
    spec = importlib.util.spec_from_file_location("noxfile_under_test", ROOT / "noxfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compiled(cache: Path, key: str, kernel: str) -> None:
    """One compile as Triton stores it: a folder per key, the kernel's files and its group index."""
    folder = cache / key
    folder.mkdir(parents=True)
    for suffix in ("ttir", "ttgir", "llir", "ptx", "cubin", "json"):
        (folder / f"{kernel}.{suffix}").write_text("x")
    (folder / f"__grp__{kernel}.json").write_text("{}")


def test_kernels_are_counted_by_their_group_index(noxfile: types.ModuleType, tmp_path: Path) -> None:
    cache = tmp_path / "triton[cache]"  # a glob character in the path is taken literally
    assert noxfile.triton_kernels(str(cache)) == {}
    compiled(cache, "AAA", "_paged_attention_kernel")
    compiled(cache, "BBB", "_paged_attention_kernel")
    compiled(cache, "CCC", "_slot_mapping_kernel")
    launcher = cache / "DDD"  # a cached launcher or utility module: no group index, not a kernel
    launcher.mkdir()
    (launcher / "__triton_launcher.so").write_text("x")
    assert noxfile.triton_kernels(str(cache)) == {"_paged_attention_kernel": 2, "_slot_mapping_kernel": 1}


def test_the_line_says_what_this_run_compiled(noxfile: types.ModuleType) -> None:
    before = {"_paged_attention_kernel": 2}
    after = {"_paged_attention_kernel": 3, "_write_kv_kernel": 1}
    line = noxfile.compiled_line(before, after, "/c")
    said = "Triton kernels compiled by this run: 2 (_paged_attention_kernel 1, _write_kv_kernel 1);"
    assert line.startswith(said)
    assert "4 in the cache at /c" in line
    warm = noxfile.compiled_line(after, after, "/c")
    assert warm.startswith("Triton kernels compiled by this run: 0; 4 in the cache at /c")
