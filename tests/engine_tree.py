"""A minimal ``vllm`` package built from the recorded sources in tests/fixtures/vllm/.

The model runner, ``BlockTables`` and its buffers are the release's own files;
the handful of modules they import are stand-ins written here, each with the
behaviour the real one has on a CPU machine (``PIN_MEMORY`` true and a UVA
check that passes, as vLLM reports them, so the worker's shims are exercised):

- ``vllm.triton_utils``: the real Triton;
- ``vllm.utils.math_utils.cdiv``; ``vllm.v1.attention.backends.utils.PAD_SLOT_ID = -1``;
- ``vllm.utils.platform_utils.is_uva_available``; ``vllm.utils.torch_utils``
  (``PIN_MEMORY``, ``async_tensor_h2d``, ``get_accelerator_view_from_cpu_tensor``);
- ``vllm.v1.kv_cache_interface``: spec dataclasses with the fields the adapter fills;
- with ``kernels=True`` (the recorded KV write, decode attention, two-way
  merge, DCP correction (``common.py``), ``unified_attention`` and its
  helpers of 0.25.0 under ``vllm/v1/attention/ops/``, the Triton backend
  ``triton_attn.py`` and ``attention/backend.py``): ``vllm.platforms.current_platform``
  (a CUDA platform, capability 9.0, that is neither ROCm nor XPU, fp8 e4m3),
  the fp8 helpers and quantisation keys of ``quant_utils``, ``KVQuantMode``
  and its lookups, ``is_quantized_kv_cache``, ``vllm.envs`` (batch invariance
  off, tensor descriptors unset), ``vllm.logger``, ``vllm._aiter_ops`` (off),
  ``vllm.config`` (``CUDAGraphMode``), ``next_power_of_2``/``RCP_LN2``,
  ``np_to_pinned_tensor``, the backend utilities the backend imports (NHD
  layout, no registered layers) and ``vllm.distributed.parallel_state``
  (``GroupCoordinator``, only named in ``common.py``'s type hints; the DCP and
  PCP group getters raising as the real ones do before the groups exist).

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
    "utils/math_utils.py": (
        "import math\n\nRCP_LN2 = 1.0 / math.log(2.0)\n\n\ndef cdiv(a, b):\n    return -(a // -b)\n\n\n"
        "def next_power_of_2(n):\n    return 1 if n < 1 else 1 << (n - 1).bit_length()\n"
    ),
    "utils/platform_utils.py": "def is_uva_available():\n    return True\n",
    "utils/torch_utils.py": (
        "import numpy as np\nimport torch\n\nPIN_MEMORY = True\n\n\n"
        "def async_tensor_h2d(data, device, dtype=None):\n"
        "    if isinstance(data, np.ndarray):\n        data = torch.from_numpy(data)\n"
        "    if isinstance(data, torch.Tensor):\n        t = data.pin_memory() if PIN_MEMORY else data\n"
        "    else:\n        t = torch.tensor(data, dtype=dtype, pin_memory=PIN_MEMORY, device='cpu')\n"
        "    return t.to(device=device, dtype=dtype)\n\n\n"
        "def is_quantized_kv_cache(kv_cache_dtype):\n"
        "    return kv_cache_dtype.startswith(('fp8', 'int'))\n\n\n"
        "def get_accelerator_view_from_cpu_tensor(t):\n"
        "    raise RuntimeError('no accelerator: needs the compiled _C extension')\n\n\n"
        "def np_to_pinned_tensor(array):\n    return torch.from_numpy(array)\n"
    ),
    "v1/__init__.py": "",
    "v1/attention/__init__.py": "",
    "v1/attention/backends/__init__.py": "",
    "v1/attention/backends/utils.py": (
        "PAD_SLOT_ID = -1\n\n\ndef get_kv_cache_layout():\n    return 'NHD'\n\n\n"
        "def get_num_attention_heads_from_layers(vllm_config, layer_names):\n    return None\n\n\n"
        "def compute_mm_prefix_range_tensor(ranges, num_reqs, device):\n"
        "    raise NotImplementedError('no multimodal prefix ranges in the harness')\n"
    ),
    "v1/worker/__init__.py": "",
    "v1/worker/gpu/__init__.py": "",
    "v1/kv_cache_interface.py": (
        "import enum\nfrom dataclasses import dataclass, field\nimport torch\n\n\n"
        "@dataclass(frozen=True)\nclass KVCacheSpec:\n    block_size: int\n\n\n"
        "@dataclass(frozen=True)\nclass AttentionSpec(KVCacheSpec):\n"
        "    num_kv_heads: int\n    head_size: int\n    dtype: torch.dtype\n\n\n"
        "@dataclass(frozen=True)\nclass FullAttentionSpec(AttentionSpec):\n"
        "    sliding_window: int | None = None\n\n\n"
        "@dataclass(frozen=True)\nclass CrossAttentionSpec(AttentionSpec):\n    pass\n\n\n"
        "@dataclass(frozen=True)\nclass SlidingWindowSpec(AttentionSpec):\n    sliding_window: int\n\n\n"
        "@dataclass(frozen=True)\nclass MambaSpec(KVCacheSpec):\n"
        "    shapes: tuple\n    dtypes: tuple\n    num_speculative_blocks: int = 0\n\n\n"
        "class KVQuantMode(enum.IntEnum):\n    NONE = 0\n    FP8_PER_TENSOR = 1\n"
        "    INT8_PER_TOKEN_HEAD = 2\n    FP8_PER_TOKEN_HEAD = 3\n    INT4_PER_TOKEN_HEAD = 4\n\n"
        "    @property\n    def is_per_token_head(self):\n        return self in (2, 3, 4)\n\n\n"
        "def get_kv_quant_mode(kv_cache_dtype):\n"
        "    return KVQuantMode.NONE if kv_cache_dtype == 'auto' else KVQuantMode.FP8_PER_TENSOR\n\n\n"
        "def kv_cache_uses_per_token_head_scales(kv_cache_dtype):\n"
        "    return get_kv_quant_mode(kv_cache_dtype).is_per_token_head\n\n\n"
        "@dataclass\nclass KVCacheGroupSpec:\n    layer_names: list\n    kv_cache_spec: KVCacheSpec\n\n\n"
        "@dataclass\nclass KVCacheConfig:\n    num_blocks: int\n    kv_cache_tensors: list\n"
        "    kv_cache_groups: list\n"
    ),
}

KERNEL_STANDINS = {
    "platforms/__init__.py": (
        "import torch\n\nfrom vllm.platforms.interface import DeviceCapability\n\n\nclass _Cuda:\n"
        "    def is_rocm(self):\n        return False\n\n    def is_xpu(self):\n        return False\n\n"
        "    def is_cuda(self):\n        return True\n\n    def is_cuda_alike(self):\n        return True\n\n"
        "    def get_device_capability(self):\n        return DeviceCapability(9, 0)\n\n"
        "    def get_device_name(self):\n        return 'stand-in'\n\n"
        "    def is_device_capability_family(self, family):\n        return False\n\n"
        "    def has_device_capability(self, capability):\n        return True\n\n"
        "    def fp8_dtype(self):\n        return torch.float8_e4m3fn\n\n\ncurrent_platform = _Cuda()\n"
    ),
    "platforms/interface.py": (
        "from typing import NamedTuple\n\n\nclass DeviceCapability(NamedTuple):\n"
        "    major: int\n    minor: int\n\n"
        "    def as_version_str(self):\n        return f'{self.major}.{self.minor}'\n\n"
        "    def to_int(self):\n        return self.major * 10 + self.minor\n"
    ),
    "envs.py": "VLLM_BATCH_INVARIANT = False\nVLLM_TRITON_ATTN_USE_TD = None\n",
    "logger.py": "import logging\n\n\ndef init_logger(name):\n    return logging.getLogger(name)\n",
    "_aiter_ops.py": (
        "class _Aiter:\n    def is_enabled(self):\n        return False\n\n\nrocm_aiter_ops = _Aiter()\n"
    ),
    "config/__init__.py": (
        "import enum\n\n\nclass CUDAGraphMode(enum.Enum):\n    NONE = 0\n    PIECEWISE = 1\n    FULL = 2\n"
        "    FULL_DECODE_ONLY = 3\n    FULL_AND_PIECEWISE = 4\n\n\nclass VllmConfig:\n    pass\n"
    ),
    "config/cache.py": "CacheDType = str\n",
    "model_executor/__init__.py": "",
    "model_executor/layers/__init__.py": "",
    "model_executor/layers/quantization/__init__.py": "",
    "model_executor/layers/quantization/utils/__init__.py": "",
    "model_executor/layers/quantization/utils/quant_utils.py": (
        "import torch\n\nFP8_DTYPE = torch.float8_e4m3fn\n\n\n"
        "def get_fp8_min_max():\n    info = torch.finfo(FP8_DTYPE)\n    return info.min, info.max\n\n\n"
        "class QuantKey:\n    def __init__(self, name):\n        self.name = name\n\n\n"
        "kFp8StaticTensorSym = QuantKey('fp8-static-tensor')\nkFp8Dynamic64Sym = QuantKey('fp8-dynamic-64')\n"
        "kFp8Dynamic128Sym = QuantKey('fp8-dynamic-128')\nkNvfp4Dynamic = QuantKey('nvfp4-dynamic')\n"
    ),
    "v1/attention/ops/__init__.py": "",
    "distributed/__init__.py": "",
    "distributed/parallel_state.py": (
        "class GroupCoordinator:\n    pass\n\n\n"
        "def get_dcp_group():\n    raise AssertionError('decode context group not initialized')\n\n\n"
        "def get_pcp_group():\n    raise AssertionError('prefill context group not initialized')\n"
    ),
}
KERNEL_FILES = (
    "triton_reshape_and_cache_flash.py", "triton_decode_attention.py", "triton_merge_attn_states.py",
    "common.py", "triton_unified_attention.py", "triton_attention_helpers.py", "triton_prefill_attention.py",
)
"""The recorded 0.25.0 kernels, installed under ``vllm/v1/attention/ops/`` by ``kernels=True``."""
BACKEND_FILES = {"triton_attn.py": "v1/attention/backends", "backend.py": "v1/attention"}
"""The recorded 0.25.0 Triton backend (builder, ``TritonAttentionImpl``) and the module of its base
classes and ``CommonAttentionMetadata``, by the folder of ``vllm/`` each goes in (``kernels=True``)."""


def build_tree(
    root: Path, version: str, *, block_table_source: str | None = None, kernels: bool = False,
    kernel_sources: dict[str, str] | None = None, startup_sources: dict[str, str] | None = None,
) -> Path:
    """Write the package under ``root/vllm`` for ``version`` (0.24.0 or 0.25.0); return ``root``.

    ``block_table_source`` replaces ``block_table.py`` (the crash test's stand-in);
    ``kernels`` adds the recorded attention kernels, ``kernel_sources`` replacing
    any of them by file name (the meta-tests' broken kernels); ``startup_sources`` replaces the start-up
    batch's ``input_batch.py`` (the start-up meta-test's broken dummy lengths).
    """
    startup_sources = startup_sources or {}
    pkg = root / "vllm"
    for rel, text in STANDINS.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(version=version) if rel == "__init__.py" else text)
    gpu = pkg / "v1" / "worker" / "gpu"
    (gpu / "model_runner.py").write_text((FIXTURES / version / "model_runner.py").read_text())
    for name in ("block_table.py", "buffer_utils.py"):  # identical in 0.24.0 and 0.25.0
        (gpu / name).write_text((FIXTURES / "0.25.0" / name).read_text())
    (gpu / "input_batch.py").write_text(startup_sources.get("input_batch.py") or
                                        (FIXTURES / version / "input_batch.py").read_text())  # fmt: skip
    (gpu / "model_states").mkdir(exist_ok=True)
    encoder_decoder = (FIXTURES / version / "encoder_decoder.py").read_text()
    (gpu / "model_states" / "encoder_decoder.py").write_text(encoder_decoder)
    if block_table_source is not None:
        (gpu / "block_table.py").write_text(block_table_source)
    if kernels:
        for rel, text in KERNEL_STANDINS.items():
            path = pkg / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        for name in KERNEL_FILES:
            text = (kernel_sources or {}).get(name) or (FIXTURES / "0.25.0" / name).read_text()
            (pkg / "v1" / "attention" / "ops" / name).write_text(text)
        for name, folder in BACKEND_FILES.items():
            text = (kernel_sources or {}).get(name) or (FIXTURES / "0.25.0" / name).read_text()
            (pkg / folder / name).write_text(text)
    return root
