"""The CUDA-graph capture finding: the captured cross-attention key length can fall short of what is admitted.

docs/spec.md §5 and §8: ModelRunner V2 captures its CUDA graphs with every
request's encoder length set to one value, ``S`` (``max_source_positions``)
when the model config has it, else ``M`` (``max_model_len``). The scheduler
admits encoder inputs up to ``min(E, B)`` (§4). A config where that bound is
larger than the captured length runs requests whose cross-attention reads
more keys than the graph was captured for. The fix of PR #46753 changed the
block-table width only, so this is open under ``mrv2`` too; it is reported
beside the verdicts, never as a failure of a sizing policy (the widths are
not what is wrong).

:func:`graph_capture_finding` judges a fixed list of real model shapes
(:data:`KNOWN_SHAPES`, the Nemotron-Parse page among them) with the engine's
rule, :func:`captured_key_length`; a meta-test passes another rule in to show
the finding can come out the other way.

This is the model, for runs without an engine (the layers below ``engine/``
may not import one). Where a release is at hand it defers to the release:
``verify --engine vllm...`` evaluates the release's own ``max_encoder_len``
(``EncoderDecoderModelState.__init__``, :mod:`crossattn_sizing.engine.vllm.startup`)
and reports the reservation from it (:mod:`crossattn_sizing.findings.startup`),
and tests/test_startup_batches.py checks :func:`captured_key_length` against
that expression of every recorded release.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from crossattn_sizing.core import admission, known_configs
from crossattn_sizing.core.config import RunnerConfig

TITLE = (
    "CUDA-graph capture takes the cross-attention key length from S, or from M when S is absent: "
    "configs without S admit longer encoder inputs than the graphs were captured for"
)

CaptureRule = Callable[[RunnerConfig], int]


def captured_key_length(config: RunnerConfig) -> int:
    """The encoder length ModelRunner V2 captures graphs with: ``S`` if the config has it, else ``M``."""
    if config.max_source_positions is not None:
        return config.max_source_positions
    return config.max_model_len


@dataclass(frozen=True)
class KnownShape:
    """A real model served a given way, and how many encoder tokens its requests really have."""

    name: str
    config: RunnerConfig
    encoder_len: int  # one real request's (Nemotron page, Whisper's 30 s, BART's longest source)


KNOWN_SHAPES: tuple[KnownShape, ...] = (
    KnownShape(
        "Nemotron-Parse 2048x1664 page, --max-model-len 2048",
        known_configs.nemotron_parse(), known_configs.NEMOTRON_PAGE_TOKENS,
    ),
    KnownShape(
        "Nemotron-Parse 2048x1664 page, --max-model-len 3328",
        known_configs.nemotron_parse(3328), known_configs.NEMOTRON_PAGE_TOKENS,
    ),
    KnownShape(
        "Nemotron-Parse 2048x1664 page, default max_model_len 9000",
        known_configs.encoder_decoder(9000, 9000, None), known_configs.NEMOTRON_PAGE_TOKENS,
    ),
    KnownShape("Whisper (30 s of audio)", known_configs.whisper(), known_configs.WHISPER_FRAMES),
    KnownShape(
        "BART, 1024-token source, --max-model-len 512",
        known_configs.encoder_decoder(512, known_configs.BART_POSITIONS, None), known_configs.BART_POSITIONS,
    ),
    KnownShape(
        "BART, 1024-token source, default max_model_len 1024",
        known_configs.encoder_decoder(known_configs.BART_POSITIONS, known_configs.BART_POSITIONS, None),
        known_configs.BART_POSITIONS,
    ),
)  # fmt: skip


@dataclass(frozen=True)
class CaptureCase:
    """One shape judged: the captured key length against the admitted bound and the real length."""

    shape: KnownShape
    captured: int
    admitted: int

    @property
    def admits_beyond_capture(self) -> bool:
        """Whether the scheduler admits encoder inputs longer than the graph captured."""
        return self.admitted > self.captured

    @property
    def real_beyond_capture(self) -> bool:
        """Whether the model's real inputs are longer than the graph captured."""
        return self.shape.encoder_len > self.captured

    def line(self) -> str:
        """The case as one report line."""
        cfg = self.shape.config
        s = "absent" if cfg.max_source_positions is None else str(cfg.max_source_positions)
        mark = "ABOVE" if self.admits_beyond_capture else "within"
        real = (f"its requests have {self.shape.encoder_len} encoder tokens"
                + (", more than captured" if self.real_beyond_capture else ""))  # fmt: skip
        return (f"{mark}: {self.shape.name}: S={s}, M={cfg.max_model_len} -> captured {self.captured} keys; "
                f"admitted up to {self.admitted}; {real}")


@dataclass(frozen=True)
class GraphCaptureFinding:
    """The shapes whose admitted encoder lengths exceed the captured key length, with every shape judged."""

    cases: tuple[CaptureCase, ...]

    @property
    def above(self) -> tuple[CaptureCase, ...]:
        """The cases that admit inputs past the capture: what makes this a finding."""
        return tuple(c for c in self.cases if c.admits_beyond_capture)

    @property
    def title(self) -> str:
        """The finding's title in reports."""
        return TITLE

    @property
    def detail(self) -> str:
        """The finding's body: how many shapes admit too much, and a config to rerun."""
        first = self.above[0]
        config_json = json.dumps(first.shape.config.to_dict(), separators=(",", ":"), sort_keys=True)
        return "\n".join(
            [
                f"{len(self.above)} of {len(self.cases)} known shapes admit encoder inputs longer than the "
                "key length CUDA graphs are captured with (S, else M; docs/spec.md §5); the block-table "
                "widths of mrv2 cover them, so this is not a sizing failure:",
                *(f"  {c.line()}" for c in self.cases),
                "rule: a config is above exactly when min(E, B) > (S if the config has S, else M)",
                f"first: {first.shape.config.describe()}",
                f"config json: {config_json}",
                "see it: crossattn-sizing reproduce nemotron-parse",
            ]
        )


def judge(shape: KnownShape, rule: CaptureRule = captured_key_length) -> CaptureCase:
    """The capture case of one known shape: the key length ``rule`` captures against the encoder bound."""
    return CaptureCase(shape, rule(shape.config), admission.encoder_bound(shape.config))


def graph_capture_finding(
    rule: CaptureRule = captured_key_length, shapes: Sequence[KnownShape] = KNOWN_SHAPES
) -> GraphCaptureFinding | None:
    """Every known shape judged under ``rule``; None when no shape admits more than it captures."""
    cases = tuple(judge(s, rule) for s in shapes)
    found = GraphCaptureFinding(cases)
    return found if found.above else None


def capture_lines(config: RunnerConfig, encoder_len: int) -> list[str]:
    """What ``reproduce`` prints about one request: its encoder length against the captured one."""
    captured = captured_key_length(config)
    where = "max_source_positions" if config.max_source_positions is not None else "max_model_len (no S)"
    head = f"graphs:    CUDA-graph capture uses {captured} encoder keys per request (from {where})"
    if encoder_len <= captured:
        return [f"{head}; this request's {encoder_len} are within it"]
    return [
        f"{head}; this request has {encoder_len}: {encoder_len - captured} more than captured "
        "(finding, not a sizing failure: docs/spec.md §5; `crossattn-sizing verify` lists it)"
    ]
