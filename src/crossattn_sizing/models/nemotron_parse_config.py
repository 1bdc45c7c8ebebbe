"""A Nemotron-Parse-like config and its encoder-token count.

The real model's config is remote code on the hub, which the harness never
fetches; this stands in for it with the fields the sizing depends on
(docs/spec.md §6): the page image size, the encoder's patch size and
``max_sequence_length = 9000``. It deliberately has no ``max_source_positions``:
that absence is what made the pre-fix width ``max(M, S)`` fall back to ``M``.

Encoder tokens per page: RADIO patches ``(H // p) x (W // p)``, a neck that
strides the width by 4 (kernel (1, 4)), plus one summary token:
``e = (H // p) * ((W // p) // 4) + 1``; 2048x1648 at patch 16 gives 3201,
2048x1664 gives 3329.

The config class subclasses ``transformers.PretrainedConfig`` so it reads and
writes the same JSON as the other adapters' configs; it is built on first
access (module ``__getattr__``) so importing this module never needs
transformers.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

from crossattn_sizing.base.errors import ConfigError
from crossattn_sizing.core import known_configs
from crossattn_sizing.models._hf import require_transformers

MODEL_TYPE = "nemotron_parse"
DEFAULT_IMAGE_SIZE = known_configs.NEMOTRON_NARROW_PAGE
DEFAULT_PATCH_SIZE = 16
MAX_SEQUENCE_LENGTH = 9000
NECK_WIDTH_STRIDE = 4  # the neck's (1, 4) stride: four patch columns become one token
SUMMARY_TOKENS = 1

_IMAGE_SIZE = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\d+)\s*$")


def parse_image_size(text: str) -> tuple[int, int]:
    """``"2048x1664"`` -> ``(2048, 1664)`` (height, width); anything else is a ConfigError."""
    match = _IMAGE_SIZE.match(text)
    if not match:
        raise ConfigError("--image-size", text, "must be HEIGHTxWIDTH in pixels, e.g. 2048x1664")
    return int(match.group(1)), int(match.group(2))


def encoder_len(image_size: tuple[int, int], patch_size: int = DEFAULT_PATCH_SIZE) -> int:
    """Encoder tokens of one page: ``(H // p) * ((W // p) // 4) + 1``.

    An image with no whole patch row, or fewer than four patch columns, would
    give no patch tokens at all; the processor never produces one, so it is
    refused rather than counted as the summary token alone.
    """
    if isinstance(patch_size, bool) or not isinstance(patch_size, int) or patch_size < 1:
        raise ConfigError("patch_size", patch_size, "must be a positive integer")
    try:
        height, width = (int(x) for x in image_size)
    except (TypeError, ValueError):
        raise ConfigError("image_size", image_size, "must be [height, width] in pixels") from None
    min_width = patch_size * NECK_WIDTH_STRIDE
    if height < patch_size or width < min_width:
        raise ConfigError(
            "image_size",
            f"{height}x{width}",
            f"must be at least {patch_size}x{min_width} pixels (one patch row, "
            f"{NECK_WIDTH_STRIDE} patch columns at patch {patch_size})",
        )
    return (height // patch_size) * ((width // patch_size) // NECK_WIDTH_STRIDE) + SUMMARY_TOKENS


def check_image_size(value: Any) -> tuple[int, int]:
    """A config's ``image_size``: one positive int (a square page) or [height, width] positive ints."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    ok = (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)
    )
    if not ok:
        raise ConfigError("image_size", value, "must be [height, width] in pixels (positive integers)")
    return int(value[0]), int(value[1])


def patch_size_of(config: Any) -> int:
    """The patch size: top-level ``patch_size``, else the vision encoder's (``encoder.patch_size``).

    The hub config nests the RADIO encoder's settings; the local class keeps a
    flat field. Both are read so a real config JSON works too.
    """
    value = getattr(config, "patch_size", None)
    if value is None:
        encoder = getattr(config, "encoder", None)
        if isinstance(encoder, Mapping):
            value = encoder.get("patch_size")
        elif encoder is not None:
            value = getattr(encoder, "patch_size", None)
    return DEFAULT_PATCH_SIZE if value is None else value


def image_size_of(config: Any) -> tuple[int, int]:
    """The page size the processor resizes every image to, as (height, width)."""
    value = getattr(config, "image_size", None)
    if value is None:
        return DEFAULT_IMAGE_SIZE
    if isinstance(value, int):  # a square size written as one number
        return value, value
    try:
        height, width = value
    except (TypeError, ValueError):
        raise ConfigError("image_size", value, "must be [height, width] in pixels") from None
    return int(height), int(width)


@functools.cache
def _config_class() -> type:
    transformers: Any = require_transformers()

    class NemotronParseConfig(transformers.PretrainedConfig):
        """The sizing-relevant fields of Nemotron-Parse's config (no ``max_source_positions``)."""

        model_type = MODEL_TYPE

        def __init__(
            self,
            image_size: tuple[int, int] | list[int] = DEFAULT_IMAGE_SIZE,
            patch_size: int = DEFAULT_PATCH_SIZE,
            max_sequence_length: int = MAX_SEQUENCE_LENGTH,
            is_encoder_decoder: bool = True,
            **kwargs: Any,
        ) -> None:
            self.image_size = list(check_image_size(image_size))
            self.patch_size = patch_size
            self.max_sequence_length = max_sequence_length
            super().__init__(is_encoder_decoder=is_encoder_decoder, **kwargs)

    NemotronParseConfig.__module__ = __name__
    return NemotronParseConfig


def __getattr__(name: str) -> Any:
    """``NemotronParseConfig`` is built on first use, so this module imports without transformers."""
    if name == "NemotronParseConfig":
        return _config_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
