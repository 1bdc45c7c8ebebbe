"""Assertions of the admission properties: the model's answer against the oracle's, for one group.

A failure names the config, the group and its layout (``kbs``, DCP ranks and
interleave), the model's answer and the oracle's, so a wrong rule reads as
which question it answers wrongly and by how much.
"""

from __future__ import annotations

from collections.abc import Callable

from crossattn_sizing.core.config import KVCacheGroup, RunnerConfig

from .failures import assert_equal, fail_rerun


def case_lines(config: RunnerConfig, group: KVCacheGroup, layout: tuple[int, int, int]) -> list[str]:
    """The heading and the case of an admission failure."""
    kbs, dcp_size, interleave = layout
    return [
        "the admission model disagrees with the reference oracle",
        f"  config: {config.describe()}",
        f"  group:  {group.kind.value} (bs={group.block_size}, kbs={kbs}), "
        f"DCP {dcp_size} x interleave {interleave}",
    ]


def assert_agrees(what: str, model: object, oracle: object, context: list[str]) -> None:
    """The model's answer ``what`` equals the oracle's."""
    assert_equal(f"admission.{what}", model, oracle, context)


def assert_narrowest_row(needed: int, e: int, accepts: Callable[[int], bool], context: list[str]) -> None:
    """``needed`` entries hold all ``e`` tokens in the oracle's layout, and ``needed - 1`` do not."""
    if not accepts(needed):
        fail_rerun([*context, f"  entries_needed({e}) = {needed}, but the oracle refuses a row of "
                              f"{needed} entries for {e} tokens"])
    if accepts(needed - 1):
        fail_rerun([*context, f"  entries_needed({e}) = {needed}, but {needed - 1} entries already hold "
                              f"{e} tokens in the oracle's layout"])
