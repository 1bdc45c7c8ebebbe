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
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.releases.sources import DirTree
from tests.test_audit_extract import fixture

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


def extract(tmp_path: Path, body: str, extra: str = "", config: RunnerConfig = CONFIG,
            files: dict[str, str | None] | None = None) -> tuple[int, ...]:  # fmt: skip
    """Widths of a runner whose ``initialize_kv_cache`` runs ``body`` then builds ``BlockTables``.

    The tree also holds the recorded spec classes and ``init_attn_backend`` of
    0.23+ (``files`` adds or, with None, removes package-relative files).
    """
    runner = (
        PRELUDE
        + textwrap.dedent(extra)
        + "\n\nclass GPUModelRunner:\n    def initialize_kv_cache(self, kv_cache_config):\n"
        + textwrap.indent(textwrap.dedent(body), " " * 8)
        + "\n        self.block_tables = BlockTables(self.max_num_reqs, widths)\n"
    )
    package = tmp_path / "vllm"
    tree: dict[str, str | None] = {
        "v1/worker/gpu/model_runner.py": runner,
        "v1/worker/gpu/block_table.py": BLOCK_TABLE,
        "v1/kv_cache_interface.py": fixture("kv_cache_interface.py"),
        "v1/worker/gpu/attn_utils.py": fixture("attn_utils_0_23.py"),
        **(files or {}),
    }
    for rel, text in tree.items():
        if text is None:
            continue
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


SPEC_CHOICE = """
widths = []
for group in kv_cache_config.kv_cache_groups:
    spec = group.kv_cache_spec
    widths.append(64 if isinstance(spec, {cls}) else 128)
"""


@pytest.mark.parametrize(
    ("cls", "expected"),
    [
        ("MLAAttentionSpec", (128, 128)),  # a FullAttentionSpec subclass: full groups are plain ones
        ("FullAttentionSpec", (64, 128)),
        ("CrossAttentionSpec", (128, 64)),
        ("AttentionSpec", (64, 64)),  # a base class of both
        ("(MambaSpec, CrossAttentionSpec)", (128, 64)),
    ],
)
def test_isinstance_on_specs_is_answered_from_the_release_class_tree(tmp_path, cls, expected):
    extra = "from vllm.v1.kv_cache_interface import AttentionSpec, CrossAttentionSpec, MambaSpec\n"
    assert extract(tmp_path, SPEC_CHOICE.format(cls=cls), extra) == expected


def test_isinstance_on_a_class_outside_the_tree_is_not_guessed(tmp_path):
    extra = "from vllm.other_module import NewSpec\n"
    expected = re.escape("isinstance(spec, vllm.other_module.NewSpec): not a class of the tree")
    with pytest.raises(ReadError, match=expected):
        extract(tmp_path, SPEC_CHOICE.format(cls="NewSpec"), extra)


def test_isinstance_names_the_spec_class_a_release_lacks(tmp_path):
    only_full = {"v1/kv_cache_interface.py": "class FullAttentionSpec:\n    pass\n"}
    expected = "the release defines no CrossAttentionSpec in vllm.v1.kv_cache_interface"
    with pytest.raises(ReadError, match=expected):
        extract(tmp_path, SPEC_CHOICE.format(cls="FullAttentionSpec"), files=only_full)
