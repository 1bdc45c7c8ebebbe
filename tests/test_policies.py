"""Hand-computed anchors for the built-in sizing policies (docs/spec.md)."""

from __future__ import annotations

import pytest

from crossattn_sizing.base.errors import PolicyCallError, PolicyLoadError
from crossattn_sizing.core.config import KVCacheGroup, RunnerConfig
from crossattn_sizing.core.policies import (
    BUILTIN_POLICIES,
    alignment_multiple,
    checked_widths,
    policy_from_spec,
)


def nemotron(m: int, bs: int = 16) -> RunnerConfig:
    return RunnerConfig(max_model_len=m, max_num_batched_tokens=4096, groups=(KVCacheGroup("cross", bs),))


def test_prefix_sizing_gives_nemotron_128_columns_against_209_needed() -> None:
    # L = max(2048, 0) = 2048; 2048 / 16 = 128 columns; 3329 tokens need cdiv(3329, 16) = 209.
    assert BUILTIN_POLICIES["mrv2-prefix"](nemotron(2048)) == (128,)
    # M = 3328 gives 208 columns: exactly the summary token (position 3328) has none.
    assert BUILTIN_POLICIES["mrv2-prefix-noalign"](nemotron(3328)) == (208,)


def test_fixed_sizing_covers_the_scheduler_budget() -> None:
    # L = max(2048, E = B = 4096) = 4096 -> 256 columns.
    assert BUILTIN_POLICIES["mrv2"](nemotron(2048)) == (256,)
    assert BUILTIN_POLICIES["v1"](nemotron(2048)) == (256,)


@pytest.mark.parametrize(
    ("bs", "pow2", "gcd"),
    [(16, 8, 8), (48, 2, 8), (96, 1, 4), (128, 1, 1), (256, 1, 1), (512, 1, 1), (1, 128, 128), (200, 1, 16)],
)
def test_alignment_rules(bs: int, pow2: int, gcd: int) -> None:
    assert alignment_multiple(bs, "pow2") == pow2
    assert alignment_multiple(bs, "gcd") == gcd
    assert alignment_multiple(bs, "none") == 1


def test_dcp_divides_sharded_groups_only_and_kernel_entries_multiply() -> None:
    config = RunnerConfig(
        max_model_len=1000,
        max_num_batched_tokens=1000,
        dcp_size=2,
        groups=(KVCacheGroup("cross", 16, 4), KVCacheGroup("full", 16, dcp_sharded=False)),
    )
    # cross: cdiv(1000, 32) = 32 blocks, x bpk 4 = 128 entries; full replicated: cdiv(1000, 16) = 63.
    assert BUILTIN_POLICIES["mrv2-noalign"](config) == (128, 63)
    # gcd alignment of 16 is 8: 32 -> 32, 63 -> 64.
    assert BUILTIN_POLICIES["mrv2"](config) == (128, 64)


def test_mamba_rows_hold_state_blocks() -> None:
    base = dict(max_model_len=1024, max_num_batched_tokens=1024, groups=(KVCacheGroup("mamba", 64),))
    assert BUILTIN_POLICIES["mrv2"](RunnerConfig(**base)) == (1,)  # type: ignore[arg-type]
    with_spec = RunnerConfig(**base, num_speculative_blocks=2)  # type: ignore[arg-type]
    assert BUILTIN_POLICIES["mrv2"](with_spec) == (3,)
    cached = RunnerConfig(**base, prefix_caching=True)  # type: ignore[arg-type]
    assert BUILTIN_POLICIES["mrv2"](cached) == (16,)


def test_decoder_only_uses_max_model_len() -> None:
    config = RunnerConfig(
        max_model_len=100,
        max_num_batched_tokens=50,
        is_encoder_decoder=False,
        groups=(KVCacheGroup("full", 10),),
    )
    assert BUILTIN_POLICIES["mrv2-noalign"](config) == (10,)


def test_module_attr_policies_load_and_bad_paths_say_why() -> None:
    assert policy_from_spec("tests.broken_policies:floor_div").__name__ == "floor_div"
    with pytest.raises(PolicyLoadError, match="unknown sizing policy 'mrv3'"):
        policy_from_spec("mrv3")
    with pytest.raises(PolicyLoadError, match="does not import"):
        policy_from_spec("no_such_module_xyz:f")
    with pytest.raises(PolicyLoadError, match="has no attribute"):
        policy_from_spec("tests.broken_policies:nope")
    with pytest.raises(PolicyLoadError, match="not callable"):
        policy_from_spec("tests.broken_policies:BROKEN.keys.__doc__")


def test_a_policy_returning_the_wrong_shape_is_reported() -> None:
    with pytest.raises(PolicyLoadError, match="expected 1 non-negative ints"):
        checked_widths(lambda c: (1, 2), nemotron(2048))
    with pytest.raises(PolicyLoadError, match=r"returned a NoneType \(None\): expected a list or tuple"):
        checked_widths(lambda c: None, nemotron(2048))  # type: ignore[arg-type,return-value]


def test_a_policy_that_raises_is_named_with_its_error_and_the_config() -> None:
    def boom(config: RunnerConfig) -> tuple[int, ...]:
        raise ValueError("no such field")

    config = nemotron(2048)
    with pytest.raises(PolicyCallError) as caught:
        checked_widths(boom, config)
    name = f"{__name__}:{boom.__qualname__}"
    assert str(caught.value) == (
        f"sizing policy {name} raised ValueError: no such field "
        f"(called with one RunnerConfig: {config.describe()})"
    )


@pytest.mark.parametrize("spec", ["vllm", "vllm==0.25.0", " vllm==0.34.0 "])
def test_engine_specs_go_to_the_engine_adapter(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``vllm`` and ``vllm==X`` name a release's own sizing, never a ``module:attr`` to import."""
    pytest.importorskip("torch", reason="the engine adapter needs torch (the test extra installs it)")
    from crossattn_sizing.engine.vllm import adapters as vllm
    from crossattn_sizing.specs.resolve import load_policy

    asked: list[tuple[str, float]] = []
    monkeypatch.setattr(
        vllm, "load_engine_policy", lambda s, deadline: asked.append((s, deadline)) or "engine policy"
    )
    monkeypatch.setenv("CROSSATTN_CALL_TIMEOUT", "7")
    assert load_policy(spec) == "engine policy"
    assert asked == [(spec, 7.0)]  # the call deadline reaches the release's worker, from the variable too
