"""The runner-config model refuses what the engine refuses, naming field, value and rule."""

from __future__ import annotations

import pytest

from crossattn_sizing.base.errors import ConfigError
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig

CROSS16 = KVCacheGroup(GroupKind.CROSS, 16)


def config(**kw: object) -> RunnerConfig:
    base: dict[str, object] = {"max_model_len": 2048, "max_num_batched_tokens": 4096, "groups": (CROSS16,)}
    base.update(kw)
    return RunnerConfig(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("make", "field", "rule"),
    [
        (lambda: config(max_num_batched_tokens=1024), "max_num_batched_tokens", "chunked prefill"),
        (lambda: config(max_model_len=0), "max_model_len", ">= 1"),
        (lambda: config(max_num_encoder_input_tokens=0), "max_num_encoder_input_tokens", ">= 1"),
        (lambda: config(max_source_positions=-1), "max_source_positions", ">= 0"),
        (lambda: config(dcp_size=0), "dcp_size", ">= 1"),
        (lambda: config(max_num_reqs=0), "max_num_reqs", ">= 1"),
        (lambda: config(max_model_len=True), "max_model_len", "integer"),
        (lambda: config(max_model_len=2048.0), "max_model_len", "integer"),
        (lambda: config(groups=()), "groups", "at least one"),
        (lambda: config(dcp_size=2, dcp_interleave=3), "dcp_interleave", "divide groups[0].block_size=16"),
        (lambda: config(dcp_size=2, dcp_interleave=32), "dcp_interleave", "divide groups[0].block_size=16"),
        (
            lambda: config(dcp_size=2, dcp_interleave=8, groups=(KVCacheGroup("cross", 16, 4),)),
            "dcp_interleave",
            "kernel_block_size=4",
        ),
        (lambda: KVCacheGroup(GroupKind.CROSS, 16, 5), "kernel_block_size", "divide block_size=16"),
        (lambda: KVCacheGroup(GroupKind.CROSS, 0), "block_size", ">= 1"),
        (lambda: KVCacheGroup("attention", 16), "kind", "must be one of"),
        (lambda: config(is_encoder_decoder=False), "groups[0].kind", "encoder-decoder"),
    ],
)
def test_invalid_configs_name_field_and_rule(make, field: str, rule: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as info:
        make()
    assert info.value.field == field
    assert rule in info.value.rule
    assert str(info.value).startswith(f"invalid config: {field}=")


def test_interleave_is_free_without_dcp() -> None:
    assert config(dcp_interleave=3).dcp_interleave == 3


def test_replicated_groups_do_not_constrain_interleave() -> None:
    groups = (CROSS16, KVCacheGroup(GroupKind.FULL, 12, dcp_sharded=False))
    assert config(dcp_size=2, dcp_interleave=8, groups=groups).dcp_factor(groups[1]) == 1


def test_absent_source_positions_differs_from_zero_but_sizes_the_same() -> None:
    absent, zero = config(), config(max_source_positions=0)
    assert absent != zero
    assert absent.source_positions == zero.source_positions == 0
    assert RunnerConfig.from_dict(absent.to_dict()).max_source_positions is None
    assert RunnerConfig.from_dict(zero.to_dict()).max_source_positions == 0


def test_encoder_budget_defaults_to_batched_tokens() -> None:
    assert config().encoder_budget == 4096
    assert config(max_num_encoder_input_tokens=3329).encoder_budget == 3329


def test_json_round_trip_keeps_every_field() -> None:
    c = config(
        max_source_positions=1500,
        dcp_size=4,
        dcp_interleave=2,
        groups=(KVCacheGroup("cross", 48, 16), KVCacheGroup("full", 16, dcp_sharded=False)),
        prefix_caching=True,
        num_speculative_blocks=2,
    )
    assert RunnerConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"max_model_len": 1, "max_num_batched_tokens": 1, "groups": [], "typo": 1}, "typo"),
        ({"max_num_batched_tokens": 1, "groups": []}, "max_model_len"),
        ({"max_model_len": 1, "max_num_batched_tokens": 1, "groups": [{"kind": "cross"}]}, "groups[0]"),
        (
            {
                "max_model_len": 1,
                "max_num_batched_tokens": 1,
                "groups": [{"kind": "cross", "block_size": 1, "x": 2}],
            },
            "groups[0].x",
        ),
        ([1, 2], "config"),
    ],
)
def test_from_dict_rejects_malformed_data(data: object, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        RunnerConfig.from_dict(data)  # type: ignore[arg-type]
    assert info.value.field == field
