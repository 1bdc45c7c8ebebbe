"""Nemotron-Parse: one page's encoder tokens, from the page and patch size; no ``max_source_positions``.

Its config class is the local stand-in (:mod:`crossattn_sizing.models.nemotron_parse_config`);
transformers has no module for it, so the differential property leaves it out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossattn_sizing.core import known_configs
from crossattn_sizing.models import nemotron_parse_config as stand_in
from crossattn_sizing.models.family import Derived, Family, KnownCase, refuse_source_len


def encoder_len(hf_config: Any, image_size: tuple[int, int] | None, source_len: int | None) -> Derived:
    """One page: ``(H // p) * ((W // p) // 4) + 1`` at the config's (or the given) page size."""
    refuse_source_len(source_len, "nemotron-parse counts them from the page size")
    p = stand_in.patch_size_of(hf_config)
    h, w = image_size if image_size is not None else stand_in.image_size_of(hf_config)
    e = stand_in.encoder_len((h, w), p)
    rows, cols = h // p, (w // p) // stand_in.NECK_WIDTH_STRIDE
    return Derived(e, f"a {h}x{w} page at patch {p}: ({h} // {p}) * (({w} // {p}) // 4) + 1 = "
                      f"{rows} * {cols} + 1 = {e}")


def check_fields(fields: Mapping[str, Any]) -> None:
    """Refuse an ``image_size`` the stand-in config cannot derive encoder tokens from."""
    stand_in.check_image_size(fields.get("image_size", stand_in.DEFAULT_IMAGE_SIZE))


FAMILY = Family(
    name="nemotron-parse",
    model_type=stand_in.MODEL_TYPE,
    encoder_len=encoder_len,
    config_class=stand_in.NemotronParseConfig,
    check_fields=check_fields,
    takes_image_size=True,
    # The shape that overflows before PR #46753's fix: a page wider than the default one, M well below e.
    known_case=KnownCase(
        max_model_len=known_configs.NEMOTRON_MAX_MODEL_LEN,
        image_size=known_configs.NEMOTRON_PAGE,
        why="the shape that overflows",
    ),
)
