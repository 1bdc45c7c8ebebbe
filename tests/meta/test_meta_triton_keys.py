"""Meta-test: the specialisation-key test fails when a layout integer is specialised again.

tests/test_triton_keys.py bounds the keys a GPU run would compile. Here a
kernel's ``do_not_specialize`` loses entries, as an edit that drops them
would, and the bound must report it: one layout integer specialised again is
named, and all of the attention kernel's specialised again overflow the count.
"""

from __future__ import annotations

import types

import pytest

from tests.test_triton_keys import bounded, kernels, triton_impl  # noqa: F401 (the fixtures)
from tests.triton_keys import drive_shapes, recording


def specialising(module: types.ModuleType, monkeypatch: pytest.MonkeyPatch, name: str, *params: str) -> None:
    """The kernel ``name`` as if ``params`` (all of them if none) were no longer in its do_not_specialize."""
    kernel = getattr(module, name)
    kept = tuple(p for p in kernel.kwargs["do_not_specialize"] if params and p not in params)
    monkeypatch.setitem(kernel.kwargs, "do_not_specialize", kept)


def grid_problems(module: types.ModuleType) -> list[str]:
    with recording(module, launch=False) as keys:
        drive_shapes(module)
    return bounded(keys)


def test_one_layout_integer_specialised_again_is_named(
    kernels: types.ModuleType, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    assert grid_problems(kernels) == []
    specialising(kernels, monkeypatch, "_slot_mapping_kernel", "kbs")
    assert grid_problems(kernels) == ["_slot_mapping_kernel specialises on the value of kbs"]


def test_the_attention_kernel_fully_specialised_overflows_the_count(
    kernels: types.ModuleType, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    specialising(kernels, monkeypatch, "_paged_attention_kernel")
    problems = grid_problems(kernels)
    assert any(p.startswith("float16: ") and "keys (at most 10)" in p for p in problems), problems
    assert "_paged_attention_kernel specialises on the value of" in problems[-1]
