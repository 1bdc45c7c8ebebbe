"""Loading an implementation by name or module:attr, and the one clear error for a bad spec."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from crossattn_sizing.errors import DeviceError, HarnessError, PolicyLoadError
from crossattn_sizing.impl import Impl, TorchImpl, load_impl
from tests.broken_impls import SlotOffByOne

ROOT = Path(__file__).resolve().parents[1]


def exploding_factory(device: torch.device) -> Impl:
    raise RuntimeError("no kernels for you")


def methodless_factory(device: torch.device) -> object:
    return object()


def test_builtin_torch() -> None:
    impl = load_impl("torch", "cpu")
    assert isinstance(impl, TorchImpl)
    assert impl.name == "torch" and impl.device == torch.device("cpu")
    assert isinstance(impl, Impl)


def test_user_implementation_by_module_attr() -> None:
    impl = load_impl("tests.broken_impls:SlotOffByOne", "cpu")
    assert isinstance(impl, SlotOffByOne)
    assert impl.name == "broken-slot-off-by-one"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("nope", "unknown implementation 'nope': use one of torch, triton or module:attr"),
        ("no_such_module_xyz:Impl", "module 'no_such_module_xyz' does not import"),
        ("tests.broken_impls:Nope", "has no attribute 'Nope'"),
        ("tests.broken_impls:BROKEN_SELF", "'BROKEN_SELF' is not callable"),
        ("tests.test_impl_load:exploding_factory", "raised RuntimeError: no kernels for you"),
        ("tests.test_impl_load:methodless_factory", "lacks slot_mapping, write_kv, paged_attention, merge"),
        (":x", "expected the form module:attr"),
    ],
)
def test_bad_specs_are_one_clear_error(spec: str, says: str) -> None:
    with pytest.raises(PolicyLoadError) as info:
        load_impl(spec, "cpu")
    assert says in str(info.value)


def test_bad_device() -> None:
    with pytest.raises(DeviceError):
        load_impl("torch", "tpu")
    if not torch.cuda.is_available():
        with pytest.raises(HarnessError, match="no CUDA device"):
            load_impl("torch", "cuda")


@pytest.mark.slow
def test_pytest_option_with_a_bad_impl_stops_the_session_once() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "properties/test_slot_mapping.py", "--impl", "nope", "-q",
         "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert out.count("unknown implementation 'nope'") == 1, out


class OldFormImpl:
    """Written to the earlier interface: eleven positional paged_attention arguments."""

    name = "old-form"

    def __init__(self, device: object) -> None:
        self.device = device

    def slot_mapping(self, table, row_stride, req_rows, query_start_loc, positions, layout, out):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def write_kv(self, key_cache, value_cache, key, value, slots):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def paged_attention(self, query, key_cache, value_cache, table, row_stride, query_start_loc,  # type: ignore[no-untyped-def]
                        seq_lens, query_positions, layout, causal, scale):
        raise NotImplementedError

    def merge(self, outs, lses):  # type: ignore[no-untyped-def]
        raise NotImplementedError


def test_an_old_form_implementation_is_refused_with_the_change_to_make() -> None:
    with pytest.raises(PolicyLoadError) as info:
        load_impl("tests.test_impl_load:OldFormImpl", "cpu")
    message = str(info.value)
    assert "does not take step" in message
    assert "paged_attention(query=, key_cache=, value_cache=, step=)" in message
    assert "docs/implementation-interface.md" in message
