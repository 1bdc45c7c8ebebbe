"""Shapes the audit met in real release wheels, reproduced in self-written source files.

Each test writes an engine-shaped tree (never the network, never a wheel) for
one shape the extractor had to learn:

- per-spec sizing with a ``dcp_sharded`` dataclass field read inside the spec's
  own ``max_num_blocks_per_req`` and an alignment exposed as a property, the
  width helper living next to the spec classes, and rows of manager-block ids
  (the block-table class never handles kernel blocks);
- which ids a row stores, read from the widths and the table class rather than
  assumed; a table class that handles kernel blocks but ignores them in the
  width is not read;
- a release without ModelRunner V1 whose ``vllm/v1/worker/`` still holds
  subclasses of the V2 runner;
- the comparison of extracted widths with the built-in policies and with the
  (length, alignment) rules, and the Whisper-shaped check.
"""

from __future__ import annotations

import json

import pytest

from crossattn_sizing.audit.extract import read_runner
from crossattn_sizing.audit.verdicts import KERNEL_IDS, MANAGER_IDS, audit_tree, manager_twin, sweep_configs
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.core.policies import widths
from tests.test_audit_extract import (
    LENGTHS,
    V1_BLOCK_TABLE,
    V1_INPUT_BATCH,
    V1_RUNNER,
    V2_BLOCK_TABLE,
    V2_BLOCK_TABLE_019,
    V2_RUNNER_019,
    V2_SIZING_HEAD,
    V2_SIZING_TAIL,
    run_cli,
    tree_of,
    v2_files,
    write_tree,
)

SAMPLE = sweep_configs()[::23]
SPLIT = [c for c in SAMPLE if any(g.bpk > 1 for g in c.groups)]

# Spec classes as frozen dataclasses: ``dcp_sharded`` is a field with a class
# default, the alignment a property, and the width helper sits in the same module.
SPEC_MODULE_WITH_FIELDS = """
import math
from dataclasses import dataclass, field

from vllm.utils.math_utils import cdiv


@dataclass(frozen=True)
class KVCacheSpec:
    block_size: int
    dcp_sharded: bool = field(default=False, kw_only=True)

    @property
    def block_table_token_alignment(self):
        return 128

    @property
    def uses_slot_mapping(self):
        return True

    def max_num_blocks_per_req(self, vllm_config, max_len):
        return cdiv(max_len, self.block_size)


def get_block_table_width(max_num_blocks, block_size, *, token_alignment=128):
    if token_alignment is not None:
        if token_alignment <= 0:
            raise ValueError("token_alignment must be positive")
        block_alignment = token_alignment // math.gcd(token_alignment, block_size)
        max_num_blocks = cdiv(max_num_blocks, block_alignment) * block_alignment
    return max_num_blocks


@dataclass(frozen=True, kw_only=True)
class AttentionSpec(KVCacheSpec):
    dcp_sharded: bool = True

    def max_num_blocks_per_req(self, vllm_config, max_len):
        parallel_config = vllm_config.parallel_config
        kv_shard_count = parallel_config.decode_context_parallel_size if self.dcp_sharded else 1
        return cdiv(max_len, self.block_size * kv_shard_count)


@dataclass(frozen=True, kw_only=True)
class FullAttentionSpec(AttentionSpec):
    pass


@dataclass(frozen=True, kw_only=True)
class SlidingWindowSpec(AttentionSpec):
    sliding_window: int


@dataclass(frozen=True)
class CrossAttentionSpec(AttentionSpec):
    pass


@dataclass(frozen=True)
class UniformTypeKVCacheSpecs(KVCacheSpec):
    first_spec: KVCacheSpec = None


@dataclass(frozen=True)
class MambaSpec(KVCacheSpec):
    num_speculative_blocks: int = 0

    @property
    def block_table_token_alignment(self):
        return None
"""

RUNNER_SPEC_FIELDS = """
from copy import deepcopy

from vllm.v1.kv_cache_interface import (
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
    get_block_table_width,
)
from vllm.v1.worker.gpu.attn_utils import init_attn_backend
from vllm.v1.worker.gpu.block_table import BlockTables


class GPUModelRunner:
    def __init__(self, vllm_config, device):
        self.vllm_config = vllm_config
        self.model_config = vllm_config.model_config
        self.scheduler_config = vllm_config.scheduler_config
        self.max_model_len = self.model_config.max_model_len
        self.max_num_reqs = self.scheduler_config.max_num_seqs
        self.max_num_tokens = self.scheduler_config.max_num_batched_tokens
        self.is_encoder_decoder = self.model_config.is_encoder_decoder
        self.device = device

    def initialize_kv_cache(self, kv_cache_config, is_profiling=False, extensible=False):
""" + V2_SIZING_HEAD + """        slot_mapping_enabled = []
        dcp_sharded = []
        sliding_window_reach = []
        for kv_cache_group in kv_cache_config.kv_cache_groups:
            spec = kv_cache_group.kv_cache_spec
            block_sizes.append(spec.block_size)
            layer_spec = spec.first_spec if isinstance(spec, UniformTypeKVCacheSpecs) else spec
            slot_mapping_enabled.append(layer_spec.uses_slot_mapping)
            dcp_sharded.append(spec.dcp_sharded)
            sliding_window_reach.append(
                layer_spec.num_retained_tokens if isinstance(layer_spec, SlidingWindowSpec) else 0
            )
            max_num_blocks = spec.max_num_blocks_per_req(self.vllm_config, block_table_max_model_len)
            max_num_blocks = get_block_table_width(
                max_num_blocks, spec.block_size, token_alignment=spec.block_table_token_alignment
            )
""" + V2_SIZING_TAIL + """            dcp_sharded=dcp_sharded,
            slot_mapping_enabled=slot_mapping_enabled,
            sliding_window_reach=sliding_window_reach,
        )
"""

# Rows of manager-block ids: no kernel block size anywhere in the class.
BLOCK_TABLE_MANAGER_IDS = """
import torch

from vllm.v1.worker.gpu.buffer_utils import StagedWriteTensor


class BlockTables:
    def __init__(self, block_sizes, max_num_reqs, max_num_batched_tokens, max_num_blocks_per_group,
                 device, cp_size=1, cp_rank=0, cp_interleave=1, slot_mapping_enabled=None,
                 dcp_sharded=None, sliding_window_reach=None):
        self.block_sizes = block_sizes
        self.max_num_reqs = max_num_reqs
        self.num_kv_cache_groups = len(self.block_sizes)
        assert len(max_num_blocks_per_group) == self.num_kv_cache_groups
        if dcp_sharded is None:
            dcp_sharded = [True] * self.num_kv_cache_groups
        self.dcp_sharded = torch.tensor(dcp_sharded, dtype=torch.bool, device=device)
        if sliding_window_reach is None or cp_size > 1:
            sliding_window_reach = [0] * self.num_kv_cache_groups
        self.has_sliding_window_groups = any(r > 0 for r in sliding_window_reach)
        self.block_tables = []
        for max_num_blocks in max_num_blocks_per_group:
            block_table = StagedWriteTensor((self.max_num_reqs, max_num_blocks), dtype=torch.int32)
            self.block_tables.append(block_table)

    def append_block_ids(self, req_index, new_block_ids, overwrite):
        for i in range(self.num_kv_cache_groups):
            row_capacity = self.block_tables[i].gpu.shape[1]
            if len(new_block_ids[i]) > row_capacity:
                raise RuntimeError("Block table write exceeds the row")
            self.block_tables[i].stage_write(req_index, 0, new_block_ids[i])
"""


def spec_field_files(length: str = "fixed") -> dict[str, str]:
    return {
        "vllm/_version.py": "__version__ = version = '9.9.9'\n",
        "vllm/v1/worker/gpu/model_runner.py": RUNNER_SPEC_FIELDS.replace("{length}", LENGTHS[length]),
        "vllm/v1/worker/gpu/block_table.py": BLOCK_TABLE_MANAGER_IDS,
        "vllm/v1/kv_cache_interface.py": SPEC_MODULE_WITH_FIELDS,
    }


def test_spec_fields_properties_and_a_neighbouring_width_helper_are_read(tmp_path):
    policy = read_runner(tree_of(tmp_path, spec_field_files()), "v2")
    for config in SAMPLE:
        # Rows hold manager-block ids: the widths are the built-in's on the manager twin.
        assert policy(config) == widths(manager_twin(config), "fixed", "gcd"), config.describe()


def test_a_replicated_group_is_not_divided_by_the_dcp_size(tmp_path):
    policy = read_runner(tree_of(tmp_path, spec_field_files()), "v2")
    config = RunnerConfig(
        max_model_len=4096,
        max_num_batched_tokens=4096,
        dcp_size=2,
        groups=(KVCacheGroup(GroupKind.FULL, 16), KVCacheGroup(GroupKind.CROSS, 16, dcp_sharded=False)),
    )
    assert policy(config) == (128, 256)
    assert policy(config) == widths(config, "fixed", "gcd")


def test_manager_id_rows_are_checked_on_the_manager_twin_and_match_mrv2(tmp_path):
    (verdict,) = audit_tree(tree_of(tmp_path, spec_field_files()), ["v2"], SAMPLE)
    assert verdict.outcome == Outcome.HOLDS, verdict.reason
    assert verdict.row_entries == MANAGER_IDS
    assert f"on {len(SPLIT)} configs" in (verdict.row_entries_why or "")
    assert verdict.matches == ["mrv2"]
    assert verdict.rules == ["L = max(M, E, S), alignment gcd"]
    assert verdict.closest is None


def test_manager_id_rows_with_the_pre_fix_length_still_fail(tmp_path):
    (verdict,) = audit_tree(tree_of(tmp_path, spec_field_files("prefix")), ["v2"], SAMPLE)
    assert verdict.outcome == Outcome.FAILS
    assert verdict.matches == ["mrv2-prefix-gcd"]
    assert verdict.counterexample is not None and verdict.counterexample.given < verdict.counterexample.needed


def test_kernel_id_rows_are_read_from_the_width(tmp_path):
    (verdict,) = audit_tree(tree_of(tmp_path, v2_files("fixed", "pow2")), ["v2"], SAMPLE)
    assert verdict.outcome == Outcome.HOLDS, verdict.reason
    assert verdict.row_entries == KERNEL_IDS
    assert verdict.matches == ["mrv2-pow2"]


def test_a_table_class_that_handles_kernel_blocks_but_ignores_them_in_the_width_is_not_read(tmp_path):
    # The ids may be expanded on append while the width counts manager blocks:
    # taking the rows as manager-block ids would be a guess.
    files = v2_files("fixed", "gcd")
    files["vllm/v1/worker/gpu/block_table.py"] = V2_BLOCK_TABLE.replace(
        "max_num_blocks = max_num_blocks_per_group[i] * self.blocks_per_kv_block[i]",
        "max_num_blocks = max_num_blocks_per_group[i]",
    )
    (verdict,) = audit_tree(tree_of(tmp_path, files), ["v2"], SAMPLE)
    assert verdict.outcome == Outcome.UNREADABLE
    assert "the row width ignores the kernel block size, but the table class handles kernel blocks" in (
        verdict.reason or ""
    )
    assert "vllm/v1/worker/gpu/block_table.py:" in (verdict.reason or "")


def test_a_release_without_kernel_blocks_matches_the_unaligned_pre_fix_policy(tmp_path):
    files = {
        "vllm/v1/worker/gpu/model_runner.py": V2_RUNNER_019,
        "vllm/v1/worker/gpu/block_table.py": V2_BLOCK_TABLE_019,
    }
    (verdict,) = audit_tree(tree_of(tmp_path, files), ["v2"], SAMPLE)
    assert verdict.outcome == Outcome.FAILS
    assert verdict.row_entries == MANAGER_IDS
    # Without DCP in the 0.19-style class every sample config agrees with the model's DCP-free rule.
    no_dcp = [c for c in SAMPLE if c.dcp_size == 1]
    (verdict_no_dcp,) = audit_tree(tree_of(tmp_path, files), ["v2"], no_dcp)
    assert verdict_no_dcp.matches == ["mrv2-prefix-noalign"]


def test_prefix_sizing_fails_in_general_but_fits_whisper(tmp_path):
    (verdict,) = audit_tree(tree_of(tmp_path, v2_files("prefix", "pow2")), ["v2"], SAMPLE)
    assert verdict.outcome == Outcome.FAILS
    assert verdict.matches == ["mrv2-prefix"]
    assert verdict.whisper is not None and verdict.whisper["holds"] is True
    assert verdict.whisper["encoder_len"] == 1500 and verdict.whisper["configs"] == 7
    assert 0 < verdict.configs_failing < verdict.configs_checked == len(SAMPLE)


def test_a_rule_without_a_built_in_is_named_with_the_closest_built_in(tmp_path):
    files = {
        "vllm/v1/worker/gpu_model_runner.py": V1_RUNNER,
        "vllm/v1/worker/gpu_input_batch.py": V1_INPUT_BATCH,
        "vllm/v1/worker/block_table.py": V1_BLOCK_TABLE,
    }
    (verdict,) = audit_tree(tree_of(tmp_path, files), ["v1"], SAMPLE)
    assert verdict.outcome == Outcome.HOLDS
    assert verdict.matches == []
    assert verdict.rules == ["L = max(M, E), alignment pow2"]
    assert verdict.closest is not None
    difference = verdict.closest["first_difference"]
    assert difference["extracted"] != difference["builtin"]
    assert verdict.closest["agreeing_configs"] < verdict.closest["configs"] == len(SAMPLE)


V2_SUBCLASS_NEXT_TO_V1 = """
from vllm.v1.worker.gpu.model_runner import GPUModelRunner


class MMEncoderModelRunner(GPUModelRunner):
    def __init__(self, vllm_config, device):
        super().__init__(vllm_config, device)
"""


def test_subclasses_of_the_v2_runner_are_not_taken_for_v1(tmp_path):
    files = spec_field_files()
    files["vllm/v1/worker/mm_encoder_model_runner.py"] = V2_SUBCLASS_NEXT_TO_V1
    tree = tree_of(tmp_path, files)
    v2, v1 = audit_tree(tree, ["v2", "v1"], SAMPLE[:3])
    assert v2.outcome == Outcome.HOLDS, v2.reason
    assert v1.outcome == Outcome.ABSENT
    assert v1.reason == (
        "vllm/v1/worker/gpu_model_runner.py not found: no ModelRunner V1 in this release (the only "
        "classes under vllm/v1/worker/ with initialize_kv_cache belong to another runner: "
        "MMEncoderModelRunner inherits it from vllm/v1/worker/gpu/model_runner.py)"
    )


def test_a_v1_subclass_in_the_v1_folder_is_still_v1(tmp_path):
    files = {
        "vllm/v1/worker/cuda_model_runner.py": V1_RUNNER,
        "vllm/v1/worker/gpu_input_batch.py": V1_INPUT_BATCH,
        "vllm/v1/worker/block_table.py": V1_BLOCK_TABLE,
        "vllm/v1/worker/xpu_model_runner.py": (
            "from vllm.v1.worker.cuda_model_runner import GPUModelRunner\n\n\n"
            "class XPUModelRunner(GPUModelRunner):\n    pass\n"
        ),
    }
    policy = read_runner(tree_of(tmp_path, files), "v1")
    assert policy.cls.name == "GPUModelRunner"
    assert policy.where.startswith("vllm/v1/worker/cuda_model_runner.py:")


def test_cli_reports_the_matching_built_in_and_the_row_entries(tmp_path, capsys):
    root = write_tree(tmp_path / "rel", spec_field_files())
    report = tmp_path / "audit.json"
    code, out, err = run_cli(
        ["audit", "--engine", f"vllm@{root / 'vllm'}", "--runner", "v2", "--json", str(report)], capsys
    )
    assert code == 0, out + err
    assert "= mrv2" in out
    data = json.loads(report.read_text())
    (result,) = data["results"]
    assert result["matches_builtin"] == ["mrv2"]
    assert result["row_entries"] == MANAGER_IDS
    assert result["equivalent_rules"] == ["L = max(M, E, S), alignment gcd"]
    assert result["whisper"]["holds"] is True
    assert result["configs_failing"] == 0


@pytest.mark.parametrize("length", ["prefix", "fixed"])
def test_every_split_config_is_checked_in_one_unit(tmp_path, length):
    (verdict,) = audit_tree(tree_of(tmp_path, spec_field_files(length)), ["v2"], SPLIT)
    assert verdict.outcome in (Outcome.HOLDS, Outcome.FAILS)
    assert verdict.row_entries == MANAGER_IDS
    if verdict.counterexample is not None:
        # The counterexample is stated for the config the release runs: kernel block = manager block.
        assert all(g.bpk == 1 for g in verdict.counterexample.config.groups)
