"""The Nemotron-Parse stand-in: encoder-token count, image-size parsing, and its config class."""

from __future__ import annotations

import os
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from crossattn_sizing.base.errors import ConfigError
from crossattn_sizing.models import nemotron_parse_config as stand_in


@pytest.mark.parametrize(
    ("image_size", "expected"),
    [((2048, 1648), 3201), ((2048, 1664), 3329), ((16, 64), 2), ((2048, 1663), 3201)],
)
def test_encoder_len_at_patch_16(image_size: tuple[int, int], expected: int) -> None:
    # (H // p) * ((W // p) // 4) + 1: 1663 // 16 = 103 patch columns -> 25 neck columns, as 1648.
    assert stand_in.encoder_len(image_size, 16) == expected


def test_spec_pages() -> None:
    assert stand_in.encoder_len((2048, 1648)) == 3201
    assert stand_in.encoder_len((2048, 1664)) == 3329


@pytest.mark.parametrize("size", [(15, 2048), (2048, 63), (0, 0)])
def test_an_image_without_whole_patches_is_refused(size: tuple[int, int]) -> None:
    with pytest.raises(ConfigError, match="image_size"):
        stand_in.encoder_len(size, 16)


def test_bad_patch_size_is_refused() -> None:
    with pytest.raises(ConfigError, match="patch_size"):
        stand_in.encoder_len((2048, 1664), 0)


@pytest.mark.parametrize(("text", "size"), [("2048x1664", (2048, 1664)), (" 10 X 20 ", (10, 20))])
def test_parse_image_size(text: str, size: tuple[int, int]) -> None:
    assert stand_in.parse_image_size(text) == size


@pytest.mark.parametrize("text", ["2048", "2048x", "axb", "2048x1664x3", "-1x5"])
def test_parse_image_size_refuses_junk(text: str) -> None:
    with pytest.raises(ConfigError, match="--image-size"):
        stand_in.parse_image_size(text)


def test_config_class_has_the_spec_fields_and_no_source_positions() -> None:
    pytest.importorskip("transformers")
    config = stand_in.NemotronParseConfig()
    assert config.model_type == "nemotron_parse"
    assert config.max_sequence_length == 9000
    assert config.patch_size == 16
    assert list(config.image_size) == [2048, 1648]
    assert config.is_encoder_decoder
    assert not hasattr(config, "max_source_positions")
    # Round trip through the JSON form a config.json holds.
    again = type(config).from_dict(config.to_dict())
    assert list(again.image_size) == [2048, 1648] and again.max_sequence_length == 9000


def test_patch_and_image_size_are_read_from_a_nested_encoder_too() -> None:
    hub = SimpleNamespace(encoder={"patch_size": 14}, image_size=[1024, 896])  # nested, as on the hub
    assert stand_in.patch_size_of(hub) == 14
    assert stand_in.image_size_of(hub) == (1024, 896)
    assert stand_in.patch_size_of(SimpleNamespace(encoder=SimpleNamespace(patch_size=8))) == 8
    assert stand_in.image_size_of(SimpleNamespace(image_size=512)) == (512, 512)


def test_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        stand_in.NoSuchThing  # noqa: B018


def test_known_pages_agree_with_the_encoder_rule() -> None:
    """The figures the audit and the properties replay are what the encoder-token rule gives."""
    from crossattn_sizing.core import known_configs

    assert stand_in.encoder_len(known_configs.NEMOTRON_PAGE) == known_configs.NEMOTRON_PAGE_TOKENS
    narrow = stand_in.encoder_len(known_configs.NEMOTRON_NARROW_PAGE)
    assert narrow == known_configs.NEMOTRON_NARROW_PAGE_TOKENS
    assert known_configs.nemotron_parse().max_source_positions is None
    assert known_configs.NEMOTRON_BATCHED_TOKENS >= known_configs.NEMOTRON_PAGE_TOKENS
