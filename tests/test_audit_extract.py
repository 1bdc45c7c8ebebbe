"""The audit reads sizing from engine-shaped source files these tests write (never the network).

Shapes follow docs/spec.md: the pre-fix ``max(M, S)`` and fixed ``max(M, E, S)``
lengths, no / power-of-two / gcd alignment, the 0.19-style width computed
inside the block-table class, the V1 runner, and shapes that cannot be read.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from crossattn_sizing.audit.extract import ReadError, read_runner
from crossattn_sizing.audit.verdicts import NEMOTRON, audit_tree, sweep_configs
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.commands import cli
from crossattn_sizing.core.policies import widths
from crossattn_sizing.releases.sources import DirTree, open_dir

LENGTHS = {
    "prefix": (
        'max(block_table_max_model_len, getattr(self.model_config.hf_config, "max_source_positions", 0))'
    ),
    "fixed": (
        "max(block_table_max_model_len, self.scheduler_config.max_num_encoder_input_tokens, "
        'getattr(self.model_config.hf_config, "max_source_positions", 0))'
    ),
    "unknown": "max(block_table_max_model_len, self.model_config.max_encoder_len)",
}
ALIGNMENTS = {
    "none": "",
    "pow2": """
            if spec.block_size <= 128:
                alignment = 128 // spec.block_size
                max_num_blocks = cdiv(max_num_blocks, alignment) * alignment
    """,
    "gcd": """
            alignment = 128 // math.gcd(128, spec.block_size)
            max_num_blocks = cdiv(max_num_blocks, alignment) * alignment
    """,
}

# Lines of the V2 runner's KV-cache set-up that stayed the same across releases (the
# release fixtures under tests/fixtures/vllm hold them too): the copy of the config and
# the encoder-decoder length on the way in, the backend and the start of the
# BlockTables call on the way out. Every V2 runner written here is built around them,
# with its own sizing loop in between and its own keyword arguments after.
V2_SIZING_HEAD = """\
        kv_cache_config = deepcopy(kv_cache_config)
        self.kv_cache_config = kv_cache_config
        block_table_max_model_len = self.max_model_len
        if self.is_encoder_decoder:
            block_table_max_model_len = {length}
        block_sizes = []
        max_num_blocks_per_group = []
"""
V2_SIZING_TAIL = """\
            max_num_blocks_per_group.append(max_num_blocks)
        self.attn_groups, attn_cg_support, self.kernel_block_sizes = init_attn_backend(
            self.kv_cache_config, self.vllm_config, self.device
        )
        self.block_tables = BlockTables(
            block_sizes=block_sizes,
            max_num_reqs=self.max_num_reqs,
            max_num_batched_tokens=self.max_num_tokens,
            max_num_blocks_per_group=max_num_blocks_per_group,
            device=self.device,
"""

V2_RUNNER = """
import math
from copy import deepcopy

from vllm.distributed.parallel_state import get_dcp_group
from vllm.utils.math_utils import cdiv
from vllm.v1.kv_cache_interface import MambaSpec
from vllm.v1.worker.gpu.attn_utils import init_attn_backend
from vllm.v1.worker.gpu.block_table import BlockTables


class GPUModelRunner:
    def __init__(self, vllm_config, device):
        self.vllm_config = vllm_config
        self.model_config = vllm_config.model_config
        self.cache_config = vllm_config.cache_config
        self.parallel_config = vllm_config.parallel_config
        self.scheduler_config = vllm_config.scheduler_config
        self.device = device
        self.max_model_len = self.model_config.max_model_len
        self.max_num_tokens = self.scheduler_config.max_num_batched_tokens
        self.max_num_reqs = self.scheduler_config.max_num_seqs
        self.is_encoder_decoder = self.model_config.is_encoder_decoder
        self.dcp_size = self.parallel_config.decode_context_parallel_size
        self.use_dcp = self.dcp_size > 1
        self.dcp_rank = get_dcp_group().rank_in_group if self.use_dcp else 0
        if self.cache_config.cache_dtype != "auto":
            self.kv_cache_dtype = self.cache_config.cache_dtype

    def {method}(self, kv_cache_config):
""" + V2_SIZING_HEAD + """        for kv_cache_group in kv_cache_config.kv_cache_groups:
            spec = kv_cache_group.kv_cache_spec
            block_sizes.append(spec.block_size)
            max_num_blocks = cdiv(block_table_max_model_len, spec.block_size * self.dcp_size)
{align}
            if isinstance(spec, MambaSpec):
                max_num_blocks = (
                    max_num_blocks if self.cache_config.enable_prefix_caching else 1
                ) + spec.num_speculative_blocks
""" + V2_SIZING_TAIL + """            kernel_block_sizes=self.kernel_block_sizes,
            cp_size=self.dcp_size,
        )
        self.cudagraph_manager = make_cudagraph_manager(self.vllm_config)
"""

V2_BLOCK_TABLE = """
import torch

from vllm.v1.worker.gpu.buffer_utils import StagedWriteTensor, UvaBackedTensor


class BlockTables:
    def __init__(self, block_sizes, max_num_reqs, max_num_batched_tokens, max_num_blocks_per_group,
                 device, kernel_block_sizes, cp_size=1, cp_rank=0, cp_interleave=1):
        self.block_sizes = block_sizes
        self.kernel_block_sizes = kernel_block_sizes
        self.max_num_reqs = max_num_reqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.device = device
        self.num_kv_cache_groups = len(self.block_sizes)
        assert len(max_num_blocks_per_group) == self.num_kv_cache_groups
        self.blocks_per_kv_block = [bs // kbs for bs, kbs in zip(block_sizes, kernel_block_sizes)]
        self.block_tables = []
        for i in range(self.num_kv_cache_groups):
            max_num_blocks = max_num_blocks_per_group[i] * self.blocks_per_kv_block[i]
            block_table = StagedWriteTensor(
                (self.max_num_reqs, max_num_blocks), dtype=torch.int32, device=device
            )
            self.block_tables.append(block_table)
        self.num_blocks = UvaBackedTensor((self.num_kv_cache_groups, self.max_num_reqs), dtype=torch.int32)
        self.input_block_tables = [torch.zeros_like(b.gpu) for b in self.block_tables]
        self.init_block_table_layout_tensors()

    def init_block_table_layout_tensors(self):
        self.block_table_ptrs = torch.tensor([b.gpu.data_ptr() for b in self.block_tables])
"""

# 0.19-style: the runner passes a length, the block-table class computes the width itself.
V2_RUNNER_019 = """
from vllm.v1.worker.gpu.block_table import BlockTables


class GPUModelRunner:
    def __init__(self, vllm_config, device):
        self.model_config = vllm_config.model_config
        self.scheduler_config = vllm_config.scheduler_config
        self.max_model_len = self.model_config.max_model_len
        self.max_num_reqs = self.scheduler_config.max_num_seqs

    def initialize_kv_cache(self, kv_cache_config):
        block_sizes = [g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups]
        max_model_len = self.max_model_len
        if self.model_config.is_encoder_decoder:
            s = getattr(self.model_config.hf_config, "max_source_positions", 0)
            max_model_len = max(max_model_len, s)
        self.block_tables = BlockTables(block_sizes, self.max_num_reqs, max_model_len, self.device)
"""

V2_BLOCK_TABLE_019 = """
import torch

from vllm.utils import cdiv


class BlockTables:
    def __init__(self, block_sizes, max_num_reqs, max_model_len, device):
        self.max_num_reqs = max_num_reqs
        self.block_tables = []
        for block_size in block_sizes:
            max_num_blocks = cdiv(max_model_len, block_size)
            self.block_tables.append(torch.zeros(self.max_num_reqs, max_num_blocks, dtype=torch.int32))
"""

V1_RUNNER = """
from vllm.config import CacheConfig
from vllm.utils.math_utils import cdiv
from vllm.v1.kv_cache_interface import EncoderOnlyAttentionSpec, MambaSpec
from vllm.v1.worker.cp_utils import get_total_cp_world_size
from vllm.v1.worker.gpu_input_batch import InputBatch
from vllm.v1.worker.utils import prepare_kernel_block_sizes


class GPUModelRunner:
    def __init__(self, vllm_config, device):
        model_config = vllm_config.model_config
        scheduler_config = vllm_config.scheduler_config
        self.cache_config = vllm_config.cache_config
        self.max_model_len = model_config.max_model_len
        self.max_num_reqs = scheduler_config.max_num_seqs
        if model_config.is_encoder_decoder:
            self.max_encoder_len = scheduler_config.max_num_encoder_input_tokens
        else:
            self.max_encoder_len = 0
        placeholder_block_size = self.cache_config.block_size or CacheConfig.DEFAULT_BLOCK_SIZE
        self._init_block_sizes = [placeholder_block_size]
        self.input_batch = InputBatch(max_num_reqs=self.max_num_reqs, block_sizes=[placeholder_block_size])

    def may_reinitialize_input_batch(self, kv_cache_config, kernel_block_sizes):
        block_sizes = []
        max_num_blocks = []
        max_model_len = max(self.max_model_len, self.max_encoder_len)
        for kv_cache_group in kv_cache_config.kv_cache_groups:
            if isinstance(kv_cache_group.kv_cache_spec, EncoderOnlyAttentionSpec):
                continue
            block_size = kv_cache_group.kv_cache_spec.block_size
            block_sizes.append(block_size)
            max_num_blocks_per_req = cdiv(max_model_len, block_size * get_total_cp_world_size())
            if isinstance(kv_cache_group.kv_cache_spec, MambaSpec):
                max_num_blocks_per_req = 1
            max_num_blocks.append(max_num_blocks_per_req)
        if block_sizes != self._init_block_sizes:
            self._init_block_sizes = block_sizes
            self.input_batch = InputBatch(
                max_num_reqs=self.max_num_reqs,
                max_model_len=max_model_len,
                block_sizes=block_sizes,
                kernel_block_sizes=kernel_block_sizes,
                max_num_blocks_per_req=max_num_blocks,
            )

    def initialize_kv_cache(self, kv_cache_config, is_profiling=False):
        self.initialize_attn_backend(kv_cache_config)
        kernel_block_sizes = prepare_kernel_block_sizes(kv_cache_config, self.attn_groups)
        self.may_reinitialize_input_batch(kv_cache_config, kernel_block_sizes)

    def initialize_attn_backend(self, kv_cache_config):
        self.attn_groups = []
"""

V1_INPUT_BATCH = """
import torch

from vllm.v1.worker.block_table import MultiGroupBlockTable


class InputBatch:
    def __init__(self, max_num_reqs, max_model_len, block_sizes, kernel_block_sizes,
                 max_num_blocks_per_req=None):
        self.token_ids_cpu_tensor = torch.zeros((max_num_reqs, max_model_len), dtype=torch.int32)
        self.block_table = MultiGroupBlockTable(
            max_num_reqs=max_num_reqs, max_model_len=max_model_len, block_sizes=block_sizes,
            kernel_block_sizes=kernel_block_sizes, max_num_blocks=max_num_blocks_per_req,
        )
"""

V1_BLOCK_TABLE = """
import torch

from vllm.utils.math_utils import cdiv


class BlockTable:
    def __init__(self, block_size, max_num_reqs, max_num_blocks_per_req, kernel_block_size):
        self.max_num_reqs = max_num_reqs
        if kernel_block_size == block_size:
            self.blocks_per_kv_block = 1
        else:
            if block_size % kernel_block_size != 0:
                raise ValueError("kernel block size must divide the block size")
            self.blocks_per_kv_block = block_size // kernel_block_size
        self.max_num_blocks_per_req = max_num_blocks_per_req * self.blocks_per_kv_block
        self.block_table = self._make_buffer(
            self.max_num_reqs, self.max_num_blocks_per_req, dtype=torch.int32
        )

    def _make_buffer(self, *size, dtype):
        return CpuGpuBuffer(*size, dtype=dtype)


class MultiGroupBlockTable:
    def __init__(self, max_num_reqs, max_model_len, block_sizes, kernel_block_sizes, max_num_blocks=None):
        if max_num_blocks is None:
            max_num_blocks = [cdiv(max_model_len, bs) for bs in block_sizes]
        max_num_blocks = [
            cdiv(n, 128 // bs) * (128 // bs) if bs <= 128 else n for n, bs in zip(max_num_blocks, block_sizes)
        ]
        self.block_tables = [
            BlockTable(bs, max_num_reqs, n, kbs)
            for bs, kbs, n in zip(block_sizes, kernel_block_sizes, max_num_blocks)
        ]
"""


# Later shape: each spec class sizes its own row, a shared helper aligns it.
SPEC_CLASSES = """
from vllm.utils.math_utils import cdiv


class KVCacheSpec:
    def max_num_blocks_per_req(self, vllm_config, max_len):
        return cdiv(max_len, self.block_size)


class AttentionSpec(KVCacheSpec):
    def max_num_blocks_per_req(self, vllm_config, max_len):
        dcp = vllm_config.parallel_config.decode_context_parallel_size
        return super().max_num_blocks_per_req(vllm_config, cdiv(max_len, dcp))


class FullAttentionSpec(AttentionSpec):
    pass


class CrossAttentionSpec(AttentionSpec):
    pass


class MambaSpec(KVCacheSpec):
    def max_num_blocks_per_req(self, vllm_config, max_len):
        return 1 + self.num_speculative_blocks
"""

WIDTH_HELPER = """
import math

from vllm.utils.math_utils import cdiv


def get_block_table_width(max_num_blocks, block_size, kernel_block_size=None, *, token_alignment=128):
    if kernel_block_size is None:
        kernel_block_size = block_size
    if block_size % kernel_block_size != 0:
        raise ValueError("kernel block size must divide the block size")
    if token_alignment is not None:
        multiple = token_alignment // math.gcd(token_alignment, block_size)
        max_num_blocks = cdiv(max_num_blocks, multiple) * multiple
    return max_num_blocks * block_size // kernel_block_size
"""

V2_RUNNER_SPEC_METHODS = V2_RUNNER.replace(
    "from vllm.v1.worker.gpu.block_table import BlockTables",
    "from vllm.v1.worker.block_table import get_block_table_width\n"
    "from vllm.v1.worker.gpu.block_table import BlockTables",
).replace(
    """            max_num_blocks = cdiv(block_table_max_model_len, spec.block_size * self.dcp_size)
{align}
            if isinstance(spec, MambaSpec):
                max_num_blocks = (
                    max_num_blocks if self.cache_config.enable_prefix_caching else 1
                ) + spec.num_speculative_blocks
""",
    """            max_num_blocks = spec.max_num_blocks_per_req(self.vllm_config, block_table_max_model_len)
            if isinstance(spec, MambaSpec):
                max_num_blocks = get_block_table_width(max_num_blocks, spec.block_size, token_alignment=None)
            else:
                max_num_blocks = get_block_table_width(max_num_blocks, spec.block_size)
""",
)


FIXTURES = Path(__file__).parent / "fixtures" / "audit"


def fixture(name: str) -> str:
    """A recorded release shape from ``tests/fixtures/audit`` (see its README)."""
    return (FIXTURES / name).read_text(encoding="utf-8")


# What every release has and the runners below lean on: the spec classes (their
# class tree answers isinstance) and init_attn_backend (whose return shape the
# harness's stand-in takes from its definition).
ENGINE_BASICS = {
    "vllm/v1/kv_cache_interface.py": "kv_cache_interface.py",
    "vllm/v1/worker/gpu/attn_utils.py": "attn_utils_0_23.py",
}


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (package-relative paths) under ``root``, with :data:`ENGINE_BASICS` where absent.

    A default goes only into a runner folder the tree already has, so a tree
    without a V2 folder stays without one.
    """
    folders = {rel.rpartition("/")[0] for rel in files}
    defaults = {
        rel: fixture(name)
        for rel, name in ENGINE_BASICS.items()
        if rel not in files and (rel.startswith("vllm/v1/kv") or rel.rpartition("/")[0] in folders)
    }
    for rel, text in {**defaults, **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def v2_files(
    length: str = "fixed", align: str = "gcd", method: str = "initialize_kv_cache"
) -> dict[str, str]:
    runner = V2_RUNNER.format(method=method, length=LENGTHS[length], align=ALIGNMENTS[align])
    return {
        "vllm/_version.py": "__version__ = version = '9.9.9'\n",
        "vllm/v1/worker/gpu/model_runner.py": runner,
        "vllm/v1/worker/gpu/block_table.py": V2_BLOCK_TABLE,
    }


def v1_files() -> dict[str, str]:
    return {
        "vllm/v1/worker/gpu_model_runner.py": V1_RUNNER,
        "vllm/v1/worker/gpu_input_batch.py": V1_INPUT_BATCH,
        "vllm/v1/worker/block_table.py": V1_BLOCK_TABLE,
    }


def tree_of(tmp_path: Path, files: dict[str, str]) -> DirTree:
    return open_dir(write_tree(tmp_path, files))


SAMPLE = sweep_configs()[::23]


@pytest.mark.parametrize(
    ("length", "align", "model_length", "model_align"),
    [
        ("prefix", "pow2", "prefix", "pow2"),
        ("prefix", "none", "prefix", "none"),
        ("fixed", "gcd", "fixed", "gcd"),
        ("fixed", "pow2", "fixed", "pow2"),
        ("fixed", "none", "fixed", "none"),
    ],
)
def test_extracted_widths_equal_the_spec_formula(tmp_path, length, align, model_length, model_align):
    policy = read_runner(tree_of(tmp_path, v2_files(length, align)), "v2")
    for config in SAMPLE:
        assert policy(config) == widths(config, model_length, model_align), config.describe()


def test_prefix_shape_fails_with_the_nemotron_counterexample(tmp_path):
    (verdict,) = audit_tree(tree_of(tmp_path, v2_files("prefix", "pow2")), ["v2"])
    assert verdict.outcome == Outcome.FAILS
    assert verdict.counterexample is not None
    assert verdict.counterexample.config == NEMOTRON
    assert verdict.nemotron == {
        "encoder_len": 3329,
        "config": NEMOTRON.describe(),
        "columns_needed": 209,
        "columns_given": 128,
        "holds": False,
    }


@pytest.mark.parametrize("align", ["none", "pow2", "gcd"])
def test_fixed_shape_holds(tmp_path, align):
    (verdict,) = audit_tree(tree_of(tmp_path, v2_files("fixed", align)), ["v2"], SAMPLE)
    assert verdict.outcome == Outcome.HOLDS, verdict.reason
    assert verdict.configs_checked == len(SAMPLE)
    assert verdict.nemotron is not None and verdict.nemotron["holds"]


def test_width_computed_inside_the_block_table_class(tmp_path):
    files = {
        "vllm/v1/worker/gpu/model_runner.py": V2_RUNNER_019,
        "vllm/v1/worker/gpu/block_table.py": V2_BLOCK_TABLE_019,
    }
    tree = tree_of(tmp_path, files)
    policy = read_runner(tree, "v2")
    for config in SAMPLE:
        if config.dcp_size == 1 and all(g.kbs == g.block_size for g in config.groups):
            assert policy(config) == widths(config, "prefix", "none")
    (verdict,) = audit_tree(tree, ["v2"])
    assert verdict.outcome == Outcome.FAILS
    assert verdict.counterexample is not None and verdict.counterexample.config == NEMOTRON


def test_spec_methods_super_and_a_width_helper_are_read_from_the_tree(tmp_path):
    runner = V2_RUNNER_SPEC_METHODS.format(method="initialize_kv_cache", length=LENGTHS["fixed"], align="")
    assert "spec.max_num_blocks_per_req(" in runner and "cdiv(block_table_max_model_len" not in runner
    files = {
        "vllm/v1/worker/gpu/model_runner.py": runner,
        "vllm/v1/worker/gpu/block_table.py": V2_BLOCK_TABLE,
        "vllm/v1/worker/block_table.py": WIDTH_HELPER,
        "vllm/v1/kv_cache_interface.py": SPEC_CLASSES,
    }
    policy = read_runner(tree_of(tmp_path, files), "v2")
    for config in SAMPLE:
        assert policy(config) == widths(config, "fixed", "gcd"), config.describe()


def test_v1_runner_through_input_batch_and_block_table(tmp_path):
    tree = tree_of(tmp_path, v1_files())
    policy = read_runner(tree, "v1")
    for config in SAMPLE:
        assert policy(config) == widths(config, "v1", "pow2"), config.describe()
    # The table is rebuilt only when block sizes differ from a placeholder the audit cannot know.
    met = {c for config in SAMPLE for c in policy.read(config).conditions}
    assert met == {"block_sizes != self._init_block_sizes"}
    (verdict,) = audit_tree(tree, ["v1"], SAMPLE)
    assert verdict.outcome == Outcome.HOLDS


def test_renamed_method_is_not_read(tmp_path):
    (verdict,) = audit_tree(tree_of(tmp_path, v2_files(method="initialize_kv_caches")), ["v2"])
    assert verdict.outcome == Outcome.UNREADABLE
    assert verdict.reason == "method initialize_kv_cache not found in vllm/v1/worker/gpu/model_runner.py"


def test_unknown_name_in_the_max_is_not_read(tmp_path):
    (verdict,) = audit_tree(tree_of(tmp_path, v2_files("unknown", "pow2")), ["v2"])
    assert verdict.outcome == Outcome.UNREADABLE
    assert "self.model_config.max_encoder_len" in verdict.reason
    assert "vllm/v1/worker/gpu/block_table.py" in verdict.reason


def test_release_without_a_v2_runner(tmp_path):
    (verdict,) = audit_tree(tree_of(tmp_path, v1_files()), ["v2"])
    assert verdict.outcome == Outcome.ABSENT
    assert verdict.reason == "vllm/v1/worker/gpu/ not found: no ModelRunner V2 in this release"


def test_runner_found_by_method_when_the_file_moved(tmp_path):
    files = v2_files("fixed", "gcd")
    files["vllm/v1/worker/gpu/runner/core.py"] = files.pop("vllm/v1/worker/gpu/model_runner.py")
    policy = read_runner(tree_of(tmp_path, files), "v2")
    assert policy.where.startswith("vllm/v1/worker/gpu/runner/core.py:")
    assert policy(NEMOTRON) == widths(NEMOTRON, "fixed", "gcd")


def test_missing_block_table_class_is_not_read(tmp_path):
    files = v2_files("fixed", "gcd")
    del files["vllm/v1/worker/gpu/block_table.py"]
    policy = read_runner(tree_of(tmp_path, files), "v2")
    with pytest.raises(ReadError, match="no block-table allocation"):
        policy(NEMOTRON)


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_prefix_release_fails(tmp_path, capsys):
    root = write_tree(tmp_path / "old", {**v2_files("prefix", "pow2"), **v1_files()})
    report = tmp_path / "reports" / "audit.json"
    code, out, err = run_cli(["audit", "--engine", f"vllm@{root / 'vllm'}", "--json", str(report)], capsys)
    assert code == 1, err
    assert "fails" in out and "holds" in out
    assert "209 columns needed, 128 given" in out
    data = json.loads(report.read_text())
    assert data["exit_status"] == 1
    by_runner = {r["runner"]: r for r in data["results"]}
    assert by_runner["v2"]["verdict"] == "fails"
    assert by_runner["v2"]["counterexample"]["config"]["max_model_len"] == 2048
    assert by_runner["v2"]["nemotron_parse"]["columns_given"] == 128
    assert by_runner["v1"]["verdict"] == "holds"


def test_cli_fixed_release_holds_on_a_package_dir(tmp_path, capsys):
    root = write_tree(tmp_path / "new", {**v2_files("fixed", "gcd"), **v1_files()})
    code, out, err = run_cli(["audit", "--engine", f"vllm@{root / 'vllm'}", "--runner", "v2"], capsys)
    assert code == 0, out + err
    assert "holds" in out and "9.9.9" in out


def test_cli_unreadable_exits_3(tmp_path, capsys):
    root = write_tree(tmp_path / "odd", v2_files(method="initialize_kv_caches"))
    code, out, _ = run_cli(["audit", "--engine", f"vllm@{root / 'vllm'}", "--runner", "v2"], capsys)
    assert code == 3
    assert "could not be read" in out
    assert "method initialize_kv_cache not found in vllm/v1/worker/gpu/model_runner.py" in out


def test_cli_user_errors_exit_2(tmp_path, capsys):
    code, _, err = run_cli(["audit"], capsys)
    assert code == 2 and "--engine vllm==X or --engine vllm@PATH" in err
    code, _, err = run_cli(["audit", "--engine", f"vllm@{tmp_path}"], capsys)
    assert code == 2 and "has no vllm package" in err and "installed vllm package directory" in err
    assert "Traceback" not in err
