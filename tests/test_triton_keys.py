"""The Triton kernels compile a few kernels per dtype on a GPU, not one per drawn layout.

On a GPU Triton compiles once per specialisation key (tests/triton_keys.py says
how the key is made); a kernel that lets Triton specialise a layout integer
(kernel block size, DCP size, rank, a stride, a count) compiles again for
every value pattern Hypothesis draws: 423 kernels for 18 tests under
``nox -s gpu`` before the kernels listed theirs in ``do_not_specialize``. Here,
on CPU, the keys are computed from the kernels' own metadata for the launches
the property suite makes and for a grid of shapes through the wrappers, and
bounded: at most :data:`MAX_KEYS_PER_DTYPE` per dtype, no integer argument
specialised on its value. ``nox -s gpu`` prints the count it compiled.
"""

from __future__ import annotations

import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossattn_sizing.core.policies import BUILTIN_POLICIES
from crossattn_sizing.impl import TritonImpl
from properties.test_attention import check_cross_attention, check_self_attention
from properties.test_slot_mapping import check_slot_mapping
from tests.test_impl_triton import triton_impl  # noqa: F401 (a fixture)
from tests.triton_keys import DTYPES, SLOT_MAPPING, Keys, drive_shapes, recording

MAX_KEYS_PER_DTYPE = 10
"""The bound issue 39 sets: a gpu session compiles a few kernels per dtype (3 kernels, at most 10 keys)."""
# Interpreted attention costs ~0.2 s an example: a few examples of each property show the arguments
# the suite passes (views, counts, layouts); the shape grid covers the value patterns systematically.
SUITE = settings(settings.get_profile("ci"), max_examples=5, print_blob=False)
MRV2 = BUILTIN_POLICIES["mrv2"]


@pytest.fixture(scope="module")
def kernels(triton_impl: TritonImpl) -> types.ModuleType:  # noqa: F811 (the fixture imported above)
    """The interpreted kernels module (test_impl_triton's fixture skips where they are compiled)."""
    from crossattn_sizing.impl import triton_kernels

    return triton_kernels


def suite_and_grid_keys(module: types.ModuleType) -> Keys:
    """The keys of the property suite's launches (a few examples each) and of the shape grid."""
    impl = TritonImpl("cpu")

    def run(body: object) -> None:
        @SUITE
        @given(data=st.data())
        def prop(data: st.DataObject) -> None:
            body(data)  # type: ignore[operator]

        prop()

    with recording(module) as keys:
        run(lambda data: check_slot_mapping(data, impl))
        run(lambda data: check_cross_attention(data, impl, MRV2, True))
        run(lambda data: check_self_attention(data, impl, MRV2))
    with recording(module, launch=False) as grid:
        drive_shapes(module)
    for group, found in grid.by_group.items():
        keys.by_group[group] |= found
    keys.launches.update(grid.launches)
    for name, params in grid.specialised.items():
        keys.specialised[name] |= params
    return keys


def bounded(keys: Keys) -> list[str]:
    """What breaks the bound: a dtype over :data:`MAX_KEYS_PER_DTYPE` keys, a kernel specialising an int."""
    problems = [f"{group}: {n} keys (at most {MAX_KEYS_PER_DTYPE})"
                for group, n in keys.counts().items() if n > MAX_KEYS_PER_DTYPE]  # fmt: skip
    problems += [f"{name} specialises on the value of {', '.join(sorted(params))}"
                 for name, params in sorted(keys.specialised.items())]  # fmt: skip
    return problems


def test_the_keys_stay_few_per_dtype(kernels: types.ModuleType) -> None:
    keys = suite_and_grid_keys(kernels)
    # Every kernel launched, under every dtype: a count over nothing would pass vacuously.
    assert set(keys.launches) == {"_slot_mapping_kernel", "_write_kv_kernel", "_paged_attention_kernel"}
    assert keys.launches["_paged_attention_kernel"] > 1000
    assert set(keys.counts()) == {SLOT_MAPPING, *(str(d).removeprefix("torch.") for d in DTYPES)}
    assert bounded(keys) == [], keys.counts()
    print("distinct specialisation keys per dtype:", keys.counts())
