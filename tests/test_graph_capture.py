"""The CUDA-graph capture finding (docs/spec.md §5): its rule, its shapes, and where it is shown."""

from __future__ import annotations

import pytest

from crossattn_sizing.core import known_configs
from crossattn_sizing.core.capacity import cross_overflow
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.policies import BUILTIN_POLICIES, checked_widths
from crossattn_sizing.findings.dcp import all_findings
from crossattn_sizing.findings.graph_capture import (
    KNOWN_SHAPES,
    TITLE,
    KnownShape,
    capture_lines,
    captured_key_length,
    graph_capture_finding,
)


def test_capture_takes_s_when_the_config_has_it_else_m() -> None:
    assert captured_key_length(known_configs.whisper()) == known_configs.WHISPER_FRAMES
    assert captured_key_length(known_configs.nemotron_parse()) == known_configs.NEMOTRON_MAX_MODEL_LEN
    zero = known_configs.encoder_decoder(512, 1024, 0)  # present but 0: the engine takes it as given
    assert captured_key_length(zero) == 0


def test_the_finding_lists_exactly_the_shapes_whose_admitted_bound_exceeds_the_capture() -> None:
    found = graph_capture_finding()
    assert found is not None and found.title == TITLE
    above = {c.shape.name for c in found.above}
    assert above == {
        "Nemotron-Parse 2048x1664 page, --max-model-len 2048",
        "Nemotron-Parse 2048x1664 page, --max-model-len 3328",
        "BART, 1024-token source, --max-model-len 512",
    }
    assert len(found.cases) == len(KNOWN_SHAPES)
    assert "Whisper" in found.detail and "within" in found.detail


@pytest.mark.parametrize("shape", KNOWN_SHAPES, ids=[s.name for s in KNOWN_SHAPES])
def test_the_fixed_sizing_covers_every_shape_so_it_is_never_a_sizing_failure(shape: KnownShape) -> None:
    widths = checked_widths(BUILTIN_POLICIES["mrv2"], shape.config)
    assert cross_overflow(widths, shape.config) is None


def test_a_shape_list_with_no_gap_gives_no_finding() -> None:
    whisper = KnownShape("Whisper", known_configs.whisper(), known_configs.WHISPER_FRAMES)
    assert graph_capture_finding(shapes=[whisper]) is None


def test_verify_lists_it_beside_the_dcp_finding() -> None:
    """Through verify's own path (a wrong import there once read as "no findings", silently)."""
    from crossattn_sizing.runs.verify_run import collect_findings

    titles = [f.title for f in collect_findings()]
    assert TITLE in titles and len(titles) == 2
    assert titles == [f.title for f in all_findings()]


def test_reproduce_lines_say_how_many_keys_exceed_the_capture() -> None:
    config: RunnerConfig = known_configs.nemotron_parse()
    (line,) = capture_lines(config, known_configs.NEMOTRON_PAGE_TOKENS)
    assert "2048 encoder keys" in line and "1281 more than captured" in line
    (within,) = capture_lines(known_configs.whisper(), known_configs.WHISPER_FRAMES)
    assert "within it" in within
