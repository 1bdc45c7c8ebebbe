"""Model adapters: config fields -> RunnerConfig, derived max_model_len, encoder tokens per request."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from crossattn_sizing.base.errors import ConfigError, HarnessError
from crossattn_sizing.core.config import GroupKind
from crossattn_sizing.models import _hf, adapters, nemotron_parse_config

transformers = pytest.importorskip("transformers", reason="the 'hf' extra is not installed")
NemotronParseConfig = nemotron_parse_config.NemotronParseConfig


def test_whisper_fields() -> None:
    config = transformers.WhisperConfig()
    scenario = adapters.build_scenario(config)
    rc = scenario.config
    assert scenario.encoder_len.value == 1500  # S: 30 s padded
    assert rc.max_source_positions == 1500
    assert rc.max_model_len == 448  # max_target_positions
    assert "max_target_positions=448" in scenario.max_model_len.why
    assert rc.max_num_batched_tokens == 2048  # smallest power of two >= max(448, 1500)
    assert rc.max_num_encoder_input_tokens is None  # E defaults to B, as in the scheduler
    assert [g.kind for g in rc.groups] == [GroupKind.FULL, GroupKind.CROSS]
    assert all(g.block_size == 16 for g in rc.groups)
    assert rc.is_encoder_decoder


def test_whisper_always_has_s_frames() -> None:
    config = transformers.WhisperConfig(max_source_positions=750)
    assert adapters.encoder_len(config).value == 750
    with pytest.raises(ConfigError, match="Whisper always has 750"):
        adapters.encoder_len(config, source_len=700)


@pytest.mark.parametrize("cls", [transformers.BartConfig, transformers.MBartConfig])
def test_bart_and_mbart_fields(cls: type) -> None:
    scenario = adapters.build_scenario(cls())
    rc = scenario.config
    assert rc.max_source_positions is None  # no such field: the bug's trigger
    assert rc.max_model_len == 1024  # max_position_embeddings
    assert scenario.encoder_len.value == 1024  # the longest source it embeds
    assert adapters.encoder_len(cls(), source_len=300).value == 300
    with pytest.raises(ConfigError, match=r"1\.\.1024"):
        adapters.encoder_len(cls(), source_len=1025)


def test_nemotron_parse_fields() -> None:
    config = NemotronParseConfig()
    scenario = adapters.build_scenario(config, max_model_len=2048, image_size=(2048, 1664))
    rc = scenario.config
    assert scenario.encoder_len.value == 3329
    assert adapters.build_scenario(config).encoder_len.value == 3201  # its own 2048x1648 page
    assert rc.max_source_positions is None
    assert rc.max_model_len == 2048
    assert rc.max_num_batched_tokens == 4096  # B >= e = 3329 to start
    assert adapters.build_scenario(config).config.max_model_len == 9000  # max_sequence_length


def test_max_model_len_is_the_smallest_length_field() -> None:
    class Config:
        model_type = "x"
        max_position_embeddings = 4096
        max_target_positions = 1000
        max_sequence_length = 2000
        n_positions = None  # present but unset: ignored

    derived = adapters.derive_max_model_len(Config())
    assert derived.value == 1000 and "max_target_positions" in derived.why


def test_max_model_len_without_any_length_field_is_the_engine_default() -> None:
    class Config:
        model_type = "x"

    assert adapters.derive_max_model_len(Config()).value == adapters.DEFAULT_MAX_MODEL_LEN


def test_a_smaller_max_model_len_is_taken_a_larger_one_refused() -> None:
    config = transformers.WhisperConfig()
    assert adapters.derive_max_model_len(config, 100).value == 100
    with pytest.raises(ConfigError, match="must be <= 448"):
        adapters.derive_max_model_len(config, 449)
    with pytest.raises(ConfigError, match="positive"):
        adapters.derive_max_model_len(config, 0)


def test_batched_tokens_that_cannot_start_are_refused() -> None:
    config = NemotronParseConfig(image_size=[2048, 1664])
    with pytest.raises(ConfigError, match="max_num_batched_tokens=3000"):
        adapters.build_scenario(config, max_model_len=2048, max_num_batched_tokens=3000)
    with pytest.raises(ConfigError, match="never scheduled"):
        adapters.build_scenario(config, max_model_len=2048, max_num_encoder_input_tokens=3000)
    rc = adapters.build_scenario(config, max_model_len=2048, max_num_batched_tokens=3329).config
    assert rc.max_num_batched_tokens == 3329


def test_image_size_only_applies_to_nemotron_parse() -> None:
    with pytest.raises(ConfigError, match="applies to nemotron-parse"):
        adapters.encoder_len(transformers.BartConfig(), image_size=(2048, 1664))
    with pytest.raises(ConfigError, match="page size"):
        adapters.encoder_len(NemotronParseConfig(), source_len=10)


def test_an_unknown_model_needs_an_explicit_count() -> None:
    config = transformers.AutoConfig.for_model("t5")
    with pytest.raises(ConfigError, match="no encoder-token rule"):
        adapters.encoder_len(config)
    assert adapters.encoder_len(config, source_len=77).value == 77


def test_config_json_round_trip_by_model_type() -> None:
    for name, cls in (("whisper", transformers.WhisperConfig), ("bart", transformers.BartConfig),
                      ("mbart", transformers.MBartConfig), ("nemotron-parse", NemotronParseConfig)):
        built = adapters.default_hf_config(name)
        assert isinstance(built, cls)
        again = adapters.hf_config_from_dict(built.to_dict())
        assert type(again) is cls
        assert adapters.build_scenario(again).config == adapters.build_scenario(built).config


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"model_type": "no-such-model"}, "cannot build"),
        ({"d_model": 4}, "needs a model_type"),
        ([], "JSON object"),
    ],
)
def test_bad_config_dicts(data: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        adapters.hf_config_from_dict(data)  # type: ignore[arg-type]


def test_unknown_model_name() -> None:
    with pytest.raises(ConfigError, match="must be one of"):
        adapters.default_hf_config("t5")


def test_missing_transformers_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_transformers(name: str, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if name == "transformers" or name.startswith("transformers."):
            raise ImportError("No module named 'transformers'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_transformers)
    with pytest.raises(HarnessError, match=r"crossattn-sizing\[hf\]"):
        _hf.require_transformers()


def test_every_registered_family_is_found_by_name_and_model_type() -> None:
    """The registry is the only list: each family's default config builds a scenario through it."""
    from crossattn_sizing.models import families

    assert len(adapters.MODEL_NAMES) == len(families.REGISTERED)
    for family in families.REGISTERED:
        config = adapters.default_hf_config(family.name)
        assert families.by_model_type(adapters.model_type(config)) is family
        scenario = adapters.build_scenario(config)
        assert scenario.encoder_len.value >= 1
        assert scenario.config.max_source_positions == adapters.source_positions(config)
