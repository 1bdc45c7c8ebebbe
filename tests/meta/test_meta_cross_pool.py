"""Meta-tests: the cross-pool capacity property fails on a sizing that ignores the encoder's limit.

The fixed tree (tests/fixtures/tensorrt_llm/0004396-fix19516) holds; the same
tree with its one line that makes the declared limit the length turned back
into a no-op fails it, shrunk to Whisper-large-v3; so does a sizer one token
short of every request, and a pool of exactly the encoder's tokens holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crossattn_sizing.core.cross_pool import CrossPoolCase
from crossattn_sizing.engine.tensorrt_llm.sizer import TrtllmCrossPool
from crossattn_sizing.findings.results import PropertyFailure
from properties.cross_pool_capacity import encoder_tokens_fit_the_cross_pool
from tests.tensorrt_llm_tree import limit_ignored, spec


class Sized:
    """A sizer giving every case a pool ``slack`` tokens longer than its encoder tokens."""

    def __init__(self, slack: int) -> None:
        self.slack = slack
        self.name = f"encoder tokens {slack:+d}"

    def pool_len(self, case: CrossPoolCase) -> int:
        return case.encoder_len + self.slack


def test_the_fixed_tree_with_the_encoder_limit_ignored_fails(tmp_path: Path) -> None:
    tree = limit_ignored(tmp_path / "ignored")
    with pytest.raises(PropertyFailure) as info:
        encoder_tokens_fit_the_cross_pool(sizer=TrtllmCrossPool(spec(tree)))
    assert "model family:   whisper-large-v3" in info.value.diagnosis
    assert "cross pool: 1500 tokens needed, 1024 held" in info.value.diagnosis


def test_a_pool_one_token_short_fails() -> None:
    with pytest.raises(PropertyFailure, match="tokens needed"):
        encoder_tokens_fit_the_cross_pool(sizer=Sized(-1))


def test_a_pool_of_exactly_the_encoder_tokens_holds() -> None:
    encoder_tokens_fit_the_cross_pool(sizer=Sized(0))
