"""Wheel cache, pip failures and reading sources out of a zip, all without a network.

Downloads are replaced by fakes: a downloader that writes a small wheel, or a
fake ``subprocess.run`` standing for pip's own failure output.
"""

from __future__ import annotations

import subprocess
import textwrap
import zipfile
from pathlib import Path

import pytest

from crossattn_sizing.audit.verdicts import audit_tree
from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.commands import cli
from crossattn_sizing.releases import sources
from crossattn_sizing.releases.sources import ZipTree, cached_wheel, fetch_wheel

RUNNER = """
from vllm.utils.math_utils import cdiv
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.utils import prepare_kernel_block_sizes


class GPUModelRunner:
    def initialize_kv_cache(self, kv_cache_config):
        length = max(self.max_model_len, self.scheduler_config.max_num_encoder_input_tokens)
        block_sizes = [g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups]
        kernel_block_sizes = prepare_kernel_block_sizes(kv_cache_config, self.attn_groups)
        widths = [cdiv(length, bs) * (bs // kbs) for bs, kbs in zip(block_sizes, kernel_block_sizes)]
        self.block_tables = BlockTables(self.max_num_reqs, widths)
"""
BLOCK_TABLE = """
import torch


class BlockTables:
    def __init__(self, max_num_reqs, widths):
        self.tables = [torch.zeros((max_num_reqs, w), dtype=torch.int32) for w in widths]
"""


def make_wheel(directory: Path, version: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm/_version.py", f"__version__ = version = '{version}'\n")
        zf.writestr("vllm/v1/worker/gpu/model_runner.py", textwrap.dedent(RUNNER))
        zf.writestr("vllm/v1/worker/gpu/block_table.py", textwrap.dedent(BLOCK_TABLE))
    return wheel


def refuse(version: str, dest: Path) -> None:
    raise AssertionError("the cache should have been used")


def test_cached_wheel_is_used_and_short_versions_match(tmp_path):
    wheel = make_wheel(tmp_path, "0.24.0")
    assert fetch_wheel("0.24.0", tmp_path, downloader=refuse) == wheel
    assert fetch_wheel("0.24", tmp_path, downloader=refuse) == wheel
    assert fetch_wheel("v0.24.0", tmp_path, downloader=refuse) == wheel
    assert cached_wheel("0.25.0", tmp_path) is None


def test_download_goes_into_the_cache_once(tmp_path):
    calls = []

    def fake(version: str, dest: Path) -> None:
        calls.append(version)
        make_wheel(dest, version)

    cache = tmp_path / "cache"
    first = fetch_wheel("0.25.0", cache, downloader=fake)
    second = fetch_wheel("0.25.0", cache, downloader=fake)
    assert first == second and first.parent == cache
    assert calls == ["0.25.0"]


def test_offline_and_bad_versions_are_user_errors(tmp_path):
    with pytest.raises(ReleaseUnavailable, match="not in the wheel cache"):
        fetch_wheel("0.24.0", tmp_path, offline=True)
    with pytest.raises(ReleaseUnavailable, match="not a release version"):
        fetch_wheel("latest; rm -rf /", tmp_path, downloader=refuse)


def test_pip_failure_is_one_line(tmp_path, monkeypatch):
    def fake_run(cmd, **kwargs):
        assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd
        stderr = (
            "ERROR: Could not find a version that satisfies the requirement vllm==0.0.1 "
            "(from versions: 0.1.4, 0.24.0)\n"
            "ERROR: No matching distribution found for vllm==0.0.1\n"
        )
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr=stderr)

    monkeypatch.setattr(sources.subprocess, "run", fake_run)
    with pytest.raises(ReleaseUnavailable) as info:
        fetch_wheel("0.0.1", tmp_path / "cache")
    assert str(info.value) == (
        "could not download vllm==0.0.1: "
        "ERROR: Could not find a version that satisfies the requirement vllm==0.0.1"
    )


def test_default_cache_follows_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert sources.default_cache_dir() == tmp_path / "crossattn-sizing" / "wheels"


def test_zip_tree_reads_members_without_extracting(tmp_path):
    tree = ZipTree(make_wheel(tmp_path, "0.30.0"), label="0.30.0")
    assert tree.read("vllm/v1/worker/gpu/model_runner.py") is not None
    assert tree.read("vllm/missing.py") is None
    assert list(tree.files("vllm/v1/worker/gpu/")) == [
        "vllm/v1/worker/gpu/block_table.py",
        "vllm/v1/worker/gpu/model_runner.py",
    ]
    (v2,) = audit_tree(tree, ["v2"])
    assert v2.outcome == "holds", v2.reason


def test_cli_audits_a_cached_release(tmp_path, capsys):
    make_wheel(tmp_path, "0.30.0")
    code = cli.main(["audit", "--engine", "vllm==0.30.0", "--cache-dir", str(tmp_path), "--offline"])
    out, err = capsys.readouterr()
    # V1 is absent from this small wheel: not a pass of its own, and no reason for exit 3 while V2 holds.
    assert code == 0, out + err
    assert "0.30.0" in out and "holds" in out and "absent" in out
    assert "vllm/v1/worker/gpu_model_runner.py not found" in out


def test_cli_download_failure_exits_2_without_traceback(tmp_path, capsys, monkeypatch):
    def failing(version: str, dest: Path, *_: object) -> None:
        raise ReleaseUnavailable(f"could not download vllm=={version}: ERROR: No matching distribution")

    monkeypatch.setattr(sources, "pip_download", failing)
    code = cli.main(["audit", "--engine", "vllm==0.0.1", "--cache-dir", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "crossattn-sizing: error: could not download vllm==0.0.1: ERROR: No matching distribution"
    )
    assert "Traceback" not in err


def test_one_fetcher_asks_other_pythons_only_when_told(tmp_path, monkeypatch):
    """The fetcher every engine shares: a release with no wheel for the running Python is looked for under
    the Pythons given (SGLang's: its pure-Python files run anyway), else refused naming them; without
    ``pythons`` (vLLM's) pip's own line is the error."""
    asked = []

    def download(version: str, dest: Path, package: str = "vllm", python: str | None = None) -> None:
        asked.append(python)
        if python != "3.99":
            raise ReleaseUnavailable(f"could not download {package}=={version}: ERROR: no wheel")
        (dest / f"{package}-{version}-cp399-cp399-manylinux_x86_64.whl").write_bytes(b"")

    monkeypatch.setattr(sources, "pip_download", download)
    wheel = fetch_wheel("9.9.9", tmp_path / "a", package="sglang", pythons=("3.98", "3.99"))
    assert wheel.name.startswith("sglang-9.9.9-cp399") and asked == [None, "3.98", "3.99"]
    with pytest.raises(ReleaseUnavailable, match=r"sglang==9\.9\.8: pip found no wheel .* Python 3\.98$"):
        fetch_wheel("9.9.8", tmp_path / "b", package="sglang", pythons=("3.98",))
    with pytest.raises(ReleaseUnavailable, match=r"^could not download vllm==9\.9\.8: ERROR: no wheel$"):
        fetch_wheel("9.9.8", tmp_path / "c")
