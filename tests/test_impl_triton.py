"""The Triton kernels, exercised on CPU through Triton's interpreter.

The property bodies of properties/ run here against the ``triton``
implementation whatever ``--impl`` says, so every CPU run of the suite executes
the Triton kernels. ``impl_from_spec`` sets ``TRITON_INTERPRET=1`` before importing
the kernels (see crossattn_sizing.impl).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from crossattn_sizing.core.policies import BUILTIN_POLICIES
from crossattn_sizing.core.slot_layout import SlotLayout
from crossattn_sizing.impl import TorchImpl, TritonImpl, impl_from_spec
from crossattn_sizing.impl.step import AttentionStep, WriteStep
from properties.test_attention import check_cross_attention, check_nemotron_parse, check_self_attention
from properties.test_slot_mapping import check_slot_mapping

CI = settings.get_profile("ci")
# The interpreter runs every kernel program in Python: an attention example
# costs ~0.2 s here against ~10 ms on the torch path. 50 examples per property
# keep this file near a minute on 2 CPU cores; the same properties run with the
# full ci/gpu budget, compiled, under `--device cuda --impl triton`.
INTERPRETED = settings(CI, max_examples=50, print_blob=False)
MRV2 = BUILTIN_POLICIES["mrv2"]


@pytest.fixture(scope="module")
def triton_impl(device: str) -> TritonImpl:
    # Interpreted and compiled Triton kernels cannot share one process: where the
    # compiled ones are (or will be) in use, they are what properties/ exercises.
    if device == "cuda":
        pytest.skip("under --device cuda the compiled Triton kernels run in properties/")
    loaded = sys.modules.get("crossattn_sizing.impl.triton_kernels")
    if loaded is not None and not loaded.INTERPRETED:
        pytest.skip("the Triton kernels were imported compiled in this process")
    impl = impl_from_spec("triton", "cpu")
    assert isinstance(impl, TritonImpl)
    return impl


def test_kernels_run_in_the_interpreter_on_cpu(triton_impl: TritonImpl) -> None:
    from crossattn_sizing.impl import triton_kernels

    assert triton_kernels.INTERPRETED
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_slot_mapping_property(triton_impl: TritonImpl) -> None:
    # Slot mapping is cheap in the interpreter (~40 ms an example): the full ci budget.
    @settings(CI, print_blob=False)
    @given(data=st.data())
    def prop(data: st.DataObject) -> None:
        check_slot_mapping(data, triton_impl)

    prop()


@pytest.mark.parametrize("guarded", [False, True], ids=["unguarded", "guarded"])
def test_cross_attention_property(triton_impl: TritonImpl, guarded: bool) -> None:
    @INTERPRETED
    @given(data=st.data())
    def prop(data: st.DataObject) -> None:
        check_cross_attention(data, triton_impl, MRV2, guarded)

    prop()


def test_self_attention_property(triton_impl: TritonImpl) -> None:
    @INTERPRETED
    @given(data=st.data())
    def prop(data: st.DataObject) -> None:
        check_self_attention(data, triton_impl, MRV2)

    prop()


def test_nemotron_parse_page(triton_impl: TritonImpl) -> None:
    check_nemotron_parse(triton_impl, MRV2, guarded=True)
    with pytest.raises(AssertionError, match="had no column"):
        check_nemotron_parse(triton_impl, BUILTIN_POLICIES["mrv2-prefix"], guarded=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", [SlotLayout(3), SlotLayout(6, 2, 3, 1), SlotLayout(4, 3, 2, 2)])
def test_attention_kernel_agrees_with_the_torch_path(
    triton_impl: TritonImpl, dtype: torch.dtype, layout: SlotLayout
) -> None:
    """Same cache, table and queries: the two implementations agree to fp32 rounding."""
    gen = torch.Generator().manual_seed(3)
    heads, head_dim, kbs = 2, 3, layout.kernel_block_size
    cells = 40 * kbs
    key_cache = torch.randn(40, kbs, heads, head_dim, generator=gen).to(dtype)
    value_cache = torch.randn(40, kbs, heads, head_dim, generator=gen).to(dtype)
    table = torch.randperm(40, generator=gen).to(torch.int32)  # 4 rows of 8 entries + tail
    qsl = torch.tensor([0, 3, 4, 21], dtype=torch.int32)
    seq_lens = torch.tensor([8 * kbs, 1, 5 * kbs + 1], dtype=torch.int32)
    query = torch.randn(21, heads, head_dim, generator=gen).to(dtype)
    q_pos = torch.randint(0, 8 * kbs * layout.dcp_size, (21,), generator=gen)
    for causal in (False, True):
        step = AttentionStep(table, 8, qsl, seq_lens, q_pos, layout, causal, 0.5)
        tensors = {"query": query, "key_cache": key_cache, "value_cache": value_cache}
        want = TorchImpl().paged_attention(**tensors, step=step)
        got = triton_impl.paged_attention(**tensors, step=step)
        torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-5)
    assert cells == key_cache.shape[0] * key_cache.shape[1]


def test_write_kernel_skips_padding_and_converts_dtype(triton_impl: TritonImpl) -> None:
    key_cache = torch.full((3, 2, 1, 2), float("nan"), dtype=torch.bfloat16)
    value_cache = key_cache.clone()
    key = torch.arange(8, dtype=torch.float32).reshape(4, 1, 2)
    slots = torch.tensor([5, -1, 0, 2], dtype=torch.int64)
    triton_impl.write_kv(key=key, value=key + 100, key_cache=key_cache, value_cache=value_cache,
                         step=WriteStep(slots))
    flat = key_cache.view(-1, 2).to(torch.float32)
    assert flat[5].tolist() == [0.0, 1.0]
    assert flat[0].tolist() == [4.0, 5.0]
    assert flat[2].tolist() == [6.0, 7.0]
    assert torch.isnan(flat[[1, 3, 4]]).all()
    assert value_cache.view(-1, 2)[2].tolist() == [106.0, 107.0]
