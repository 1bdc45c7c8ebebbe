"""The harness's stand-ins for engine helpers, one test per release shape, on recorded fixtures.

Each stand-in (:mod:`crossattn_sizing.audit.standins`) replaces an engine
function the audit never runs. These tests pin what each gives for every
shape the releases 0.19.0-0.34.0 have (``tests/fixtures/audit``), and that a
value a stand-in does not compute, or a shape it cannot take, is reported as
the stand-in's, with the line, never blamed on the release. The spec-class and
branch tests cover the shapes that made 0.29.0 and V1 from 0.26.0 unreadable.
No wheel is read here.
"""

from __future__ import annotations

import re

import pytest

from crossattn_sizing.audit.extract import ReadError
from crossattn_sizing.core.config import GroupKind, KVCacheGroup
from tests.test_audit_extract import fixture
from tests.test_audit_interp import CONFIG, extract

# A full group of 64-token blocks split into 16-token kernel blocks, and a cross group of 32.
SPLIT = CONFIG.replace(groups=(KVCacheGroup(GroupKind.FULL, 64, 16), KVCacheGroup(GroupKind.CROSS, 32)))
ATTN_UTILS = "v1/worker/gpu/attn_utils.py"
IMPORT_BACKEND = "from vllm.v1.worker.gpu.attn_utils import init_attn_backend\n"
SIZES = "sizes = [g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups]\n"
KERNEL_WIDTHS = SIZES + (
    "widths = [cdiv(self.max_model_len, bs) * (bs // kbs)\n"
    "          for bs, kbs in zip(sizes, kernel_block_sizes)]\n"
)
MANAGER_WIDTHS = SIZES + "widths = [cdiv(self.max_model_len, bs) for bs in sizes]\n"

# (fixture, the release's call site, whether it reads kernel block sizes from the result)
INIT_ATTN_BACKEND_SHAPES = {
    "0.19.0": (
        "attn_utils_0_19.py",
        "self.attn_backends, self.attn_groups = init_attn_backend({args})",
        False,
    ),
    "0.20.0": (
        "attn_utils_0_20.py",
        "self.attn_backends, self.attn_groups, attn_cg_support = init_attn_backend({args})",
        False,
    ),
    "0.22.0": (
        "attn_utils_0_22.py",
        "(self.attn_backends, self.attn_groups, attn_cg_support, kernel_block_sizes) = (\n"
        "    init_attn_backend({args}))",
        True,
    ),
    "0.23.0": (
        "attn_utils_0_23.py",
        "self.attn_groups, attn_cg_support, kernel_block_sizes = init_attn_backend({args})",
        True,
    ),
}
ARGS = "kv_cache_config, self.vllm_config, self.device"


@pytest.mark.parametrize("release", sorted(INIT_ATTN_BACKEND_SHAPES))
def test_init_attn_backend_takes_each_release_shape_from_its_definition(tmp_path, release):
    name, call, kernel = INIT_ATTN_BACKEND_SHAPES[release]
    body = call.format(args=ARGS) + "\n" + (KERNEL_WIDTHS if kernel else MANAGER_WIDTHS)
    widths = extract(tmp_path, body, IMPORT_BACKEND, SPLIT, files={ATTN_UTILS: fixture(name)})
    # 2048 tokens: 32 blocks of 64 = 128 kernel blocks of 16; 64 blocks of 32.
    assert widths == ((128, 64) if kernel else (32, 64))


@pytest.mark.parametrize("release", sorted(INIT_ATTN_BACKEND_SHAPES))
def test_values_the_stand_in_does_not_compute_say_so(tmp_path, release):
    name, call, _ = INIT_ATTN_BACKEND_SHAPES[release]
    body = call.format(args=ARGS) + "\nwidths = [self.attn_groups, self.attn_groups]\n"
    expected = r"`attn_groups` \(value \d of \d returned at vllm/v1/worker/gpu/attn_utils.py:\d+\) "
    expected += "is not computed by the harness's stand-in for init_attn_backend"
    with pytest.raises(ReadError, match=expected):
        extract(tmp_path, body, IMPORT_BACKEND, SPLIT, files={ATTN_UTILS: fixture(name)})


def test_a_call_site_of_another_shape_names_the_stand_in_and_both_lines(tmp_path):
    # 0.23's call site against 0.22's four-value definition: the mismatch is the harness's to explain.
    _, call, _ = INIT_ATTN_BACKEND_SHAPES["0.23.0"]
    body = call.format(args=ARGS) + "\n" + KERNEL_WIDTHS
    expected = re.escape("unpacking 4 values into 3 targets at vllm/v1/worker/gpu/model_runner.py:") + r"\d+ "
    expected += re.escape("(the 4 values come from the harness's stand-in for init_attn_backend ")
    expected += re.escape("(shape read from vllm/v1/worker/gpu/attn_utils.py:") + r"\d+\)\)"
    with pytest.raises(ReadError, match=expected):
        extract(tmp_path, body, IMPORT_BACKEND, SPLIT, files={ATTN_UTILS: fixture("attn_utils_0_22.py")})


def test_without_the_definition_the_stand_in_does_not_guess_a_shape(tmp_path):
    body = INIT_ATTN_BACKEND_SHAPES["0.23.0"][1].format(args=ARGS) + "\n" + KERNEL_WIDTHS
    with pytest.raises(ReadError, match="stand-in for init_attn_backend needs the release's definition"):
        extract(tmp_path, body, IMPORT_BACKEND, SPLIT, files={ATTN_UTILS: None})


def test_a_definition_without_a_tuple_return_is_reported(tmp_path):
    odd = "def init_attn_backend(kv_cache_config, vllm_config, device):\n    result = {}\n    return result\n"
    body = INIT_ATTN_BACKEND_SHAPES["0.23.0"][1].format(args=ARGS) + "\n" + KERNEL_WIDTHS
    expected = r"cannot take its return shape: the return at .*attn_utils.py:3 is not a tuple"
    with pytest.raises(ReadError, match=expected):
        extract(tmp_path, body, IMPORT_BACKEND, SPLIT, files={ATTN_UTILS: odd})


def test_prepare_kernel_block_sizes_gives_the_groups_kernel_block_sizes(tmp_path):
    # ModelRunner V1's helper (every release with V1): one kernel block size per group.
    extra = "from vllm.v1.worker.utils import prepare_kernel_block_sizes\n"
    body = "kernel_block_sizes = prepare_kernel_block_sizes(kv_cache_config, None)\n" + KERNEL_WIDTHS
    assert extract(tmp_path, body, extra, SPLIT) == (128, 64)


@pytest.mark.parametrize(
    ("helper", "expression"),
    [
        ("get_dcp_group", "get_dcp_group().world_size"),
        ("get_total_cp_world_size", "get_total_cp_world_size()"),
    ],
)
def test_dcp_size_stand_ins_give_the_configs_dcp_size(tmp_path, helper, expression):
    extra = f"from vllm.distributed.parallel_state import {helper}\n"
    body = SIZES + f"widths = [cdiv(self.max_model_len, bs * {expression}) for bs in sizes]\n"
    assert extract(tmp_path, body, extra, CONFIG.replace(dcp_size=2)) == (64, 64)


def test_prefill_context_parallelism_is_modelled_as_absent(tmp_path):
    extra = "from vllm.distributed.parallel_state import get_pcp_group\n"
    body = SIZES + "widths = [cdiv(self.max_model_len, bs * get_pcp_group().world_size) for bs in sizes]\n"
    assert extract(tmp_path, body, extra, CONFIG.replace(dcp_size=2)) == (128, 128)


# -- spec classes and kinds, read from the release's own kv_cache_interface --------------
CIRCULAR = """
from vllm.v1.kv_cache_interface import CircularBufferSpec, MambaSpec

"""
SPEC_BRANCH = """
widths = []
for group in kv_cache_config.kv_cache_groups:
    spec = group.kv_cache_spec
    skip = isinstance(spec, (MambaSpec, CircularBufferSpec))
    widths.append(1 if skip else cdiv(self.max_model_len, spec.block_size))
"""


def test_a_spec_class_added_by_a_release_is_answered_without_a_list(tmp_path):
    spec_module = fixture("kv_cache_interface.py") + fixture("circular_buffer_spec_0_29.py")
    files = {"v1/kv_cache_interface.py": spec_module}
    assert extract(tmp_path, SPEC_BRANCH, CIRCULAR, files=files) == (128, 128)


def test_a_spec_class_the_release_does_not_define_is_not_guessed(tmp_path):
    # 0.28.0's spec module has no CircularBufferSpec: the import leaves the tree.
    with pytest.raises(ReadError, match=re.escape("CircularBufferSpec): not a class of the tree")):
        extract(tmp_path, SPEC_BRANCH, CIRCULAR)


KIND_LOOP = """
widths = []
for group in kv_cache_config.kv_cache_groups:
    kind = get_kv_cache_spec_kind(group.kv_cache_spec)
    if kind == KVCacheSpecKind.ENCODER_ONLY_ATTENTION:
        continue
    widths.append(cdiv(self.max_model_len, group.kv_cache_spec.block_size))
"""
KIND_IMPORT = "from vllm.v1.kv_cache_interface import KVCacheSpecKind, get_kv_cache_spec_kind\n"


def test_a_loop_skipping_encoder_only_groups_by_kind_is_read(tmp_path):
    # V1 from 0.26.0: the kind enum decides the `continue`, so the per-group lists stay known.
    assert extract(tmp_path, KIND_LOOP, KIND_IMPORT) == (128, 128)


def test_an_undecidable_continue_reports_the_condition_its_line_and_cause(tmp_path):
    body = KIND_LOOP.replace("get_kv_cache_spec_kind(group.kv_cache_spec)", "self.model_config.kind(group)")
    expected = re.escape("depends on `kind == KVCacheSpecKind.ENCODER_ONLY_ATTENTION` (")
    expected += re.escape("vllm/v1/worker/gpu/model_runner.py:")
    expected += r"\d+\), which is unknown: call to self\.model_config\.kind\(\)"
    with pytest.raises(ReadError, match=expected):
        extract(tmp_path, body, KIND_IMPORT)


def test_a_table_builder_left_unevaluated_is_reported_with_the_reason(tmp_path):
    # The allocation loop of BlockTables iterates over an unknown: "no table reached" says why.
    body = "widths = self.model_config.get_widths()\n"
    expected = r"no block-table allocation reached from .*: "
    expected += r"the call at vllm/v1/worker/gpu/block_table.py:\d+, "
    expected += r"which builds a block table, is not evaluated: call to self\.model_config\.get_widths\(\)"
    with pytest.raises(ReadError, match=expected):
        extract(tmp_path, body)
