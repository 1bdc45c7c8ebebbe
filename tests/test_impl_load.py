"""Loading an implementation by name or module:attr, and the one clear error for a bad spec."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from crossattn_sizing.base.errors import DeviceError, HarnessError, PolicyLoadError
from crossattn_sizing.impl import CALL_KEYWORDS, Impl, TorchImpl, impl_from_spec, keyword_call_problems
from tests.broken_impls import SlotOffByOne

ROOT = Path(__file__).resolve().parents[1]


def exploding_factory(device: torch.device) -> Impl:
    raise RuntimeError("no kernels for you")


def methodless_factory(device: torch.device) -> object:
    return object()


def test_builtin_torch() -> None:
    impl = impl_from_spec("torch", "cpu")
    assert isinstance(impl, TorchImpl)
    assert impl.name == "torch" and impl.device == torch.device("cpu")
    assert isinstance(impl, Impl)


def test_user_implementation_by_module_attr() -> None:
    impl = impl_from_spec("tests.broken_impls:SlotOffByOne", "cpu")
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
        impl_from_spec(spec, "cpu")
    assert says in str(info.value)


def test_bad_device() -> None:
    with pytest.raises(DeviceError):
        impl_from_spec("torch", "tpu")
    if not torch.cuda.is_available():
        with pytest.raises(HarnessError, match="no CUDA device"):
            impl_from_spec("torch", "cuda")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spec", "says"),
    [("nope", "unknown implementation 'nope'"),
     ("tests.test_impl_load:OldFormImpl", "OldFormImpl.slot_mapping(table, row_stride")],
)
def test_pytest_option_with_a_bad_impl_stops_the_session_once(spec: str, says: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "properties/test_slot_mapping.py", "--impl", spec, "-q",
         "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert out.count(says) == 1, out


class CurrentFormImpl:
    """Every method in the current form: called by keyword, step metadata in one record."""

    name = "current-form"

    def __init__(self, device: object) -> None:
        self.device = device

    def slot_mapping(self, step, out):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def write_kv(self, key, value, key_cache, value_cache, step):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def paged_attention(self, query, key_cache, value_cache, step):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def merge(self, outs, lses):  # type: ignore[no-untyped-def]
        raise NotImplementedError


class OldFormImpl(CurrentFormImpl):
    """Written to the earlier interface: positional metadata in place of the step records."""

    name = "old-form"

    def slot_mapping(self, table, row_stride, req_rows, query_start_loc, positions, layout, out):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def write_kv(self, key_cache, value_cache, key, value, slots):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def paged_attention(self, query, key_cache, value_cache, table, row_stride, query_start_loc,  # type: ignore[no-untyped-def]
                        seq_lens, query_positions, layout, causal, scale):
        raise NotImplementedError


def test_a_current_form_implementation_loads_whatever_its_parameter_kinds() -> None:
    assert impl_from_spec("tests.test_impl_load:CurrentFormImpl", "cpu").name == "current-form"


def test_an_old_form_implementation_is_refused_naming_each_method_and_its_call() -> None:
    with pytest.raises(PolicyLoadError) as info:
        impl_from_spec("tests.test_impl_load:OldFormImpl", "cpu")
    message = str(info.value)
    assert "\n" not in message
    assert ("OldFormImpl.slot_mapping(table, row_stride, req_rows, query_start_loc, positions, layout, out) "
            "does not take step: the harness calls slot_mapping(step=, out=) with step: SlotStep "
            "(crossattn_sizing.impl.step) holding table, row_stride, req_rows, query_start_loc, positions, "
            "layout"
            ) in message
    assert "write_kv(key=, value=, key_cache=, value_cache=, step=) with step: WriteStep" in message
    assert "holding slots" in message
    assert "paged_attention(query=, key_cache=, value_cache=, step=) with step: AttentionStep" in message
    assert "merge" not in message
    assert message.endswith("(see docs/implementation-interface.md)")


def positional_only(self, step, out, /):  # type: ignore[no-untyped-def]
    raise NotImplementedError


def extra_required(self, outs, lses, weights):  # type: ignore[no-untyped-def]
    raise NotImplementedError


def any_keyword(self, **kwargs):  # type: ignore[no-untyped-def]
    raise NotImplementedError


def keyword_only_with_a_default(self, *, outs, lses, weights=None):  # type: ignore[no-untyped-def]
    raise NotImplementedError


def problems_with(method: str, form: object) -> list[str]:
    """What the loader says of CurrentFormImpl with one method replaced by ``form``."""
    cls = type("OneChanged", (CurrentFormImpl,), {method: form})
    return keyword_call_problems(cls("cpu"))


@pytest.mark.parametrize(
    ("method", "form", "says"),
    [
        ("slot_mapping", OldFormImpl.slot_mapping,
         "slot_mapping(table, row_stride, req_rows, query_start_loc, positions, layout, out) "
         "does not take step"),
        ("write_kv", OldFormImpl.write_kv,
         "write_kv(key_cache, value_cache, key, value, slots) does not take step"),
        ("slot_mapping", positional_only, "slot_mapping(step, out) does not take step, out"),
        ("merge", extra_required,
         "merge(outs, lses, weights) needs weights, which the harness does not pass: "
         "the harness calls merge(outs=, lses=)"),
    ],
)
def test_one_method_the_harness_cannot_call_is_named_alone(method: str, form: object, says: str) -> None:
    problems = problems_with(method, form)
    assert len(problems) == 1
    assert problems[0].startswith(f"OneChanged.{says}")


@pytest.mark.parametrize("form", [any_keyword, keyword_only_with_a_default])
def test_a_method_the_harness_can_call_by_keyword_is_accepted(form: object) -> None:
    assert problems_with("merge", form) == []


def test_the_builtin_implementations_take_the_call_keywords() -> None:
    assert keyword_call_problems(TorchImpl("cpu")) == []
    assert CALL_KEYWORDS["slot_mapping"] == ("step", "out")


CWD_MODULE = """
from crossattn_sizing.core.policies import BUILTIN_POLICIES
from crossattn_sizing.impl import TorchImpl


def policy(config):
    return BUILTIN_POLICIES["mrv2"](config)


class Kernels(TorchImpl):
    name = "beside-the-user"
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info < (3, 11), reason="PYTHONSAFEPATH (3.11) is how the test starts the "
                    "harness as its console script does, without the current folder on sys.path")
def test_a_module_in_the_current_folder_loads_as_policy_and_implementation(tmp_path: Path) -> None:
    """``module:attr`` is looked for in the current folder first, in the judge and in every worker, for
    a policy and an implementation alike, however the harness was started (issue 35, item 3).

    ``PYTHONSAFEPATH=1`` starts every process as the console script starts the judge: without the
    current folder on ``sys.path``. Before the fix ``--impl`` said "does not import" there while
    ``--policy`` loaded."""
    from tests.bad_input_cases import NEMOTRON
    from tests.processes import cli, run

    (tmp_path / "beside.py").write_text(CWD_MODULE)
    env = {"PYTHONSAFEPATH": "1", "PYTHONPATH": ""}
    checked = run(cli("check", "--policy", "beside:policy", "--config", NEMOTRON, "--encoder-len", "3329"),
                  env=env, cwd=tmp_path)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    in_process = run(cli("check", "--policy", "beside:policy", "--in-process", "--config", NEMOTRON,
                         "--encoder-len", "3329"), env=env, cwd=tmp_path)  # fmt: skip
    assert in_process.returncode == 0, in_process.stdout + in_process.stderr
    verified = run(cli("verify", "--policy", "beside:policy", "--impl", "beside:Kernels", "--jobs", "1",
                       "--max-examples", "2", "-k", "test_slot_mapping_matches_reference"),
                   env=env, cwd=tmp_path)  # fmt: skip
    out = verified.stdout + verified.stderr
    assert verified.returncode == 0, out
    assert "does not import" not in out and "holds" in out
    missing = run(cli("verify", "--policy", "mrv2", "--impl", "elsewhere:Kernels", "-k", "test_slot_mapping"),
                  env=env, cwd=tmp_path)  # fmt: skip  # meta: a module that is nowhere is still refused
    assert missing.returncode != 0 and "does not import" in missing.stderr, missing.stderr
