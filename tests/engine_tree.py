"""A minimal ``vllm`` package built from the recorded sources in tests/fixtures/vllm/.

The model runner, ``BlockTables`` and its buffers are the release's own files;
the handful of modules they import are stand-ins written here, each with the
behaviour the real one has on a CPU machine (``PIN_MEMORY`` true and a UVA
check that passes, as vLLM reports them, so the worker's shims are exercised):

- ``vllm.triton_utils``: the real Triton;
- ``vllm.utils.math_utils.cdiv``; ``vllm.v1.attention.backends.utils.PAD_SLOT_ID = -1``;
- ``vllm.utils.platform_utils.is_uva_available``; ``vllm.utils.torch_utils``
  (``PIN_MEMORY``, ``async_tensor_h2d``, ``get_accelerator_view_from_cpu_tensor``);
- ``vllm.v1.kv_cache_interface``: spec dataclasses with the fields the adapter fills.

The worker cannot tell it from an installed release, which is the point: the
default test run drives the real worker, protocol and shims with no download.
"""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "vllm"

STANDINS = {
    "__init__.py": '__version__ = "{version}"\n',
    "triton_utils.py": "import triton\nfrom triton import language as tl\n",
    "utils/__init__.py": "",
    "utils/math_utils.py": "def cdiv(a, b):\n    return -(a // -b)\n",
    "utils/platform_utils.py": "def is_uva_available():\n    return True\n",
    "utils/torch_utils.py": (
        "import numpy as np\nimport torch\n\nPIN_MEMORY = True\n\n\n"
        "def async_tensor_h2d(data, device, dtype=None):\n"
        "    if isinstance(data, np.ndarray):\n        data = torch.from_numpy(data)\n"
        "    if isinstance(data, torch.Tensor):\n        t = data.pin_memory() if PIN_MEMORY else data\n"
        "    else:\n        t = torch.tensor(data, dtype=dtype, pin_memory=PIN_MEMORY, device='cpu')\n"
        "    return t.to(device=device, dtype=dtype)\n\n\n"
        "def get_accelerator_view_from_cpu_tensor(t):\n"
        "    raise RuntimeError('no accelerator: needs the compiled _C extension')\n"
    ),
    "v1/__init__.py": "",
    "v1/attention/__init__.py": "",
    "v1/attention/backends/__init__.py": "",
    "v1/attention/backends/utils.py": "PAD_SLOT_ID = -1\n",
    "v1/worker/__init__.py": "",
    "v1/worker/gpu/__init__.py": "",
    "v1/kv_cache_interface.py": (
        "from dataclasses import dataclass, field\nimport torch\n\n\n"
        "@dataclass(frozen=True)\nclass KVCacheSpec:\n    block_size: int\n\n\n"
        "@dataclass(frozen=True)\nclass AttentionSpec(KVCacheSpec):\n"
        "    num_kv_heads: int\n    head_size: int\n    dtype: torch.dtype\n\n\n"
        "@dataclass(frozen=True)\nclass FullAttentionSpec(AttentionSpec):\n"
        "    sliding_window: int | None = None\n\n\n"
        "@dataclass(frozen=True)\nclass CrossAttentionSpec(AttentionSpec):\n    pass\n\n\n"
        "@dataclass(frozen=True)\nclass SlidingWindowSpec(AttentionSpec):\n    sliding_window: int\n\n\n"
        "@dataclass(frozen=True)\nclass MambaSpec(KVCacheSpec):\n"
        "    shapes: tuple\n    dtypes: tuple\n    num_speculative_blocks: int = 0\n\n\n"
        "@dataclass\nclass KVCacheGroupSpec:\n    layer_names: list\n    kv_cache_spec: KVCacheSpec\n\n\n"
        "@dataclass\nclass KVCacheConfig:\n    num_blocks: int\n    kv_cache_tensors: list\n"
        "    kv_cache_groups: list\n"
    ),
}


def build_tree(root: Path, version: str, *, block_table_source: str | None = None) -> Path:
    """Write the package under ``root/vllm`` for ``version`` (0.24.0 or 0.25.0); return ``root``.

    ``block_table_source`` replaces ``block_table.py`` (the crash test's stand-in).
    """
    pkg = root / "vllm"
    for rel, text in STANDINS.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(version=version) if rel == "__init__.py" else text)
    gpu = pkg / "v1" / "worker" / "gpu"
    (gpu / "model_runner.py").write_text((FIXTURES / version / "model_runner.py").read_text())
    for name in ("block_table.py", "buffer_utils.py"):  # identical in 0.24.0 and 0.25.0
        (gpu / name).write_text((FIXTURES / "0.25.0" / name).read_text())
    if block_table_source is not None:
        (gpu / "block_table.py").write_text(block_table_source)
    return root
