"""The ``crossattn-sizing check`` line: how every capacity failure says to replay itself.

A failure found by a property, by ``reproduce`` or by ``prove`` is replayed
the same way, without pytest or Hypothesis: one config and its requests'
encoder lengths under one policy. Written in one place so the line a report
prints is always one ``check`` parses (compact, sorted JSON, shell-quoted).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Sequence

from crossattn_sizing.core.config import RunnerConfig


def check_line(policy_spec: str, config: RunnerConfig, encoder_lens: Iterable[int]) -> str:
    """The shell command that judges ``config`` and these encoder lengths under ``policy_spec``."""
    text = json.dumps(config.to_dict(), separators=(",", ":"), sort_keys=True)
    lens = ",".join(str(e) for e in encoder_lens)
    return (
        f"crossattn-sizing check --policy {shlex.quote(policy_spec)} --config {shlex.quote(text)} "
        f"--encoder-len {lens}"
    )


def startup_check_line(engine_spec: str, config: RunnerConfig, capture_sizes: Iterable[int]) -> str:
    """The shell command that replays an engine's start-up batches for ``config`` and these capture sizes."""
    text = json.dumps(config.to_dict(), separators=(",", ":"), sort_keys=True)
    sizes = ",".join(str(n) for n in capture_sizes) or "none"
    return (
        f"crossattn-sizing check --engine {shlex.quote(engine_spec)} --config {shlex.quote(text)} "
        f"--startup {sizes}"
    )


def batch_check_line(spec: str, context_len: int, kv_capacity: int, batch: Sequence[Sequence[int]]) -> str:
    """The command replaying one batch on an engine answering in its own worker (``check --engine SPEC``
    judges one batch: SGLang's): ``crossattn-sizing check --engine SPEC ... --requests E:p:d,...``
    (``E:p:d:cached`` for a request with a cached prefix)."""
    requests = ",".join(":".join(str(x) for x in r) for r in batch)
    return shlex.join(
        [
            "crossattn-sizing",
            "check",
            "--engine",
            spec.strip(),
            "--context-len",
            str(context_len),
            "--kv-capacity",
            str(kv_capacity),
            "--requests",
            requests,
        ]
    )
