"""Pinned regressions: cases every run replays as explicit examples.

Two sources: the hand-pinned shapes below (the known bug and its safe twin,
from shared/spec.md), and the JSON files in this folder, which the nightly
fuzzer writes for each new failure. A JSON file outlives the example database
and Hypothesis upgrades, so nothing a nightly run finds is lost.
"""

from __future__ import annotations

import json
from pathlib import Path

from crossattn_sizing.config import GroupKind, KVCacheGroup, RunnerConfig
from properties.strategies import CapacityCase

HERE = Path(__file__).parent


def nemotron_parse(max_model_len: int) -> CapacityCase:
    """Nemotron-Parse, 2048x1664 page at patch 16: 3329 encoder tokens, no max_source_positions."""
    config = RunnerConfig(
        max_model_len=max_model_len,
        max_num_batched_tokens=4096,  # >= 3329: the engine refuses to start otherwise
        max_source_positions=None,
        groups=(KVCacheGroup(GroupKind.FULL, 16), KVCacheGroup(GroupKind.CROSS, 16)),
    )
    return CapacityCase(config, (3329,))


def whisper() -> CapacityCase:
    """Whisper: 1500 encoder frames, max_source_positions 1500, max_model_len 448 (safe)."""
    config = RunnerConfig(
        max_model_len=448,
        max_num_batched_tokens=1500,
        max_source_positions=1500,
        groups=(KVCacheGroup(GroupKind.FULL, 16), KVCacheGroup(GroupKind.CROSS, 16)),
    )
    return CapacityCase(config, (1500,))


def load_case(path: Path) -> CapacityCase:
    """Read one regression file written by the fuzzer (see ``write_case``)."""
    data = json.loads(path.read_text())
    return CapacityCase(RunnerConfig.from_dict(data["config"]), tuple(data["encoder_lens"]))


def case_to_json(case: CapacityCase, **meta: object) -> str:
    """The regression file's text for a case, with free-form metadata (property, policy, seed)."""
    payload = {"config": case.config.to_dict(), "encoder_lens": list(case.encoder_lens), "meta": meta}
    return json.dumps(payload, indent=2, sort_keys=True) + "\n"


def pinned_cases() -> list[CapacityCase]:
    """Every case to replay: the hand-pinned shapes, then the fuzzer's files in name order."""
    cases = [nemotron_parse(2048), nemotron_parse(3328), whisper()]
    cases.extend(load_case(p) for p in sorted(HERE.glob("*.json")))
    return cases
