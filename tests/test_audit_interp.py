"""The restricted evaluator: what it computes, and what it refuses to guess.

Each test writes a tiny runner whose ``initialize_kv_cache`` body is given,
plus a block-table class that allocates one ``(max_num_reqs, w)`` table per
entry of ``widths``; the extracted widths, or the reason they could not be
read, are checked.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from crossattn_sizing.audit.extract import ReadError, read_runner
from crossattn_sizing.audit.sources import DirTree
from crossattn_sizing.config import GroupKind, KVCacheGroup, RunnerConfig

PRELUDE = """
import math
from vllm.utils.math_utils import cdiv
from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec
from vllm.v1.worker.gpu.block_table import BlockTables

ALIGN = 128
"""
BLOCK_TABLE = """
import torch


class BlockTables:
    def __init__(self, max_num_reqs, widths):
        self.max_num_reqs = max_num_reqs
        for w in widths:
            torch.zeros(self.max_num_reqs, w)
"""
CONFIG = RunnerConfig(
    max_model_len=2048,
    max_num_batched_tokens=4096,
    max_source_positions=1500,
    groups=(KVCacheGroup(GroupKind.FULL, 16), KVCacheGroup(GroupKind.CROSS, 16)),
)


def extract(tmp_path: Path, body: str, extra: str = "", config: RunnerConfig = CONFIG) -> tuple[int, ...]:
    runner = (
        PRELUDE
        + textwrap.dedent(extra)
        + "\n\nclass GPUModelRunner:\n    def initialize_kv_cache(self, kv_cache_config):\n"
        + textwrap.indent(textwrap.dedent(body), " " * 8)
        + "\n        self.block_tables = BlockTables(self.max_num_reqs, widths)\n"
    )
    package = tmp_path / "vllm"
    for rel, text in {
        "v1/worker/gpu/model_runner.py": runner,
        "v1/worker/gpu/block_table.py": BLOCK_TABLE,
    }.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(textwrap.dedent(text))
    return read_runner(DirTree(package), "v2")(config)


def test_arithmetic_loops_and_module_constants(tmp_path):
    body = """
    widths = []
    for group in kv_cache_config.kv_cache_groups:
        bs = group.kv_cache_spec.block_size
        n = cdiv(self.max_model_len, bs)
        a = ALIGN // math.gcd(ALIGN, bs)
        n = cdiv(n, a) * a
        widths.append(n)
    """
    assert extract(tmp_path, body) == (128, 128)


def test_getattr_uses_source_positions_when_present_and_default_when_absent(tmp_path):
    body = """
    n = max(self.max_model_len, getattr(self.model_config.hf_config, "max_source_positions", 0))
    widths = [n, n]
    """
    assert extract(tmp_path, body) == (2048, 2048)
    whisper_like = CONFIG.replace(max_model_len=448)
    assert extract(tmp_path, body, config=whisper_like) == (1500, 1500)
    assert extract(tmp_path, body, config=CONFIG.replace(max_source_positions=None)) == (2048, 2048)


def test_undecidable_branch_with_equal_outcomes_is_kept(tmp_path):
    body = """
    if self.cache_config.cache_dtype != "auto":
        n = self.max_model_len
    else:
        n = self.max_model_len
    widths = [n, n]
    """
    assert extract(tmp_path, body) == (2048, 2048)


def test_undecidable_branch_with_different_outcomes_is_not_read(tmp_path):
    body = """
    n = self.max_model_len
    if self.cache_config.cache_dtype != "auto":
        n = 2 * n
    widths = [n, n]
    """
    with pytest.raises(ReadError, match=re.escape("depends on `self.cache_config.cache_dtype != 'auto'`")):
        extract(tmp_path, body)


def test_short_helpers_are_followed_and_their_returns_merged(tmp_path):
    extra = """
    def length_for(model_len, encoder_len, flag):
        if flag:
            return max(model_len, encoder_len)
        return max(encoder_len, model_len)
    """
    body = """
    n = length_for(self.max_model_len, self.scheduler_config.max_num_encoder_input_tokens, self.unknown_flag)
    widths = [cdiv(n, 16), cdiv(n, 16)]
    """
    assert extract(tmp_path, body, extra) == (256, 256)


def test_calls_to_engine_code_are_never_evaluated(tmp_path):
    body = """
    n = self.model_config.get_max_encoder_len()
    widths = [n, n]
    """
    with pytest.raises(ReadError, match=r"call to .*get_max_encoder_len\(\) .* is not evaluated"):
        extract(tmp_path, body)


def test_spec_subclasses_the_config_cannot_tell_apart_are_not_guessed(tmp_path):
    body = """
    widths = []
    for group in kv_cache_config.kv_cache_groups:
        spec = group.kv_cache_spec
        widths.append(64 if isinstance(spec, MLAAttentionSpec) else 128)
    """
    with pytest.raises(ReadError, match="depends on"):
        extract(tmp_path, body)
    body_full = body.replace("MLAAttentionSpec", "FullAttentionSpec")
    assert extract(tmp_path, body_full) == (64, 128)


def test_a_raise_on_the_config_path_is_reported(tmp_path):
    body = """
    if self.max_model_len > 1024:
        raise ValueError("too long")
    widths = [1, 1]
    """
    with pytest.raises(
        ReadError, match=re.escape("the source raises at vllm/v1/worker/gpu/model_runner.py:")
    ):
        extract(tmp_path, body)


def test_allocation_count_must_match_the_groups(tmp_path):
    with pytest.raises(ReadError, match="3 block-table allocations for 2 KV-cache groups"):
        extract(tmp_path, "widths = [1, 2, 3]")


def test_tuple_unpacking_and_kernel_block_sizes(tmp_path):
    body = """
    self.attn_groups, support, kernel_block_sizes = init_attn_backend(kv_cache_config, None, None)
    sizes = [g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups]
    widths = [cdiv(self.max_model_len, bs) * (bs // kbs) for bs, kbs in zip(sizes, kernel_block_sizes)]
    """
    extra = "from vllm.v1.worker.gpu.attn_utils import init_attn_backend\n"
    config = CONFIG.replace(groups=(KVCacheGroup(GroupKind.FULL, 64, 16), KVCacheGroup(GroupKind.CROSS, 32)))
    assert extract(tmp_path, body, extra, config) == (32 * 4, 64)
