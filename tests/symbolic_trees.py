"""Recorded vLLM trees laid out for reading (never executed): what ``prove --symbolic`` and the audit read.

The release's own files from tests/fixtures/vllm/ (the model runner, ``BlockTables``
and its buffers; 0.34.0's CPU runner) with the audit's recorded release shapes
from tests/fixtures/audit/ (the spec classes and ``init_attn_backend``'s
signature). Nothing else: a helper the tree lacks is an outside name the
evaluator leaves unknown, as in a real wheel where it calls into torch.
"""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
VLLM = FIXTURES / "vllm"
AUDIT = FIXTURES / "audit"

RUNNER_FILES = {
    "0.24.0": {"v1/worker/gpu/model_runner.py": VLLM / "0.24.0" / "model_runner.py"},
    "0.25.0": {"v1/worker/gpu/model_runner.py": VLLM / "0.25.0" / "model_runner.py"},
    "0.34.0": {"v1/worker/cpu/standalone_model_runner.py": VLLM / "0.34.0" / "standalone_model_runner.py"},
}
"""Each recorded release's runner files, by package-relative path."""

SHARED = {
    "v1/worker/gpu/block_table.py": VLLM / "0.25.0" / "block_table.py",
    "v1/worker/gpu/buffer_utils.py": VLLM / "0.25.0" / "buffer_utils.py",
    "v1/kv_cache_interface.py": AUDIT / "kv_cache_interface.py",
    "v1/worker/gpu/attn_utils.py": AUDIT / "attn_utils_0_23.py",
}


def read_tree(root: Path, version: str, replace: dict[str, str] | None = None) -> Path:
    """Write ``root/vllm`` for ``version``; ``replace`` maps a package-relative path to new text. Returns
    the package folder (``vllm@`` takes its parent; ``open_dir`` reads the package itself)."""
    package = root / "vllm"
    (package).mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(f"__version__ = {version!r}\n")
    for rel, source in {**SHARED, **RUNNER_FILES[version]}.items():
        path = package / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text((replace or {}).get(rel) or source.read_text())
    return package
