"""The start-up property: every batch an engine builds for itself fits the rows its kernels read."""

from __future__ import annotations

from typing import Any


def assert_startup_holds(verdict: Any, config: Any, capture_sizes: tuple[int, ...]) -> None:
    """Fail with every breach, the release's file:line and a replay line when a start-up judge broke.

    ``verdict``: a :class:`crossattn_sizing.engine.vllm.startup.StartupVerdict`.
    """
    if verdict.holds:
        return
    from crossattn_sizing.core.check_line import startup_check_line

    where = verdict.batches[0].where
    lines = [f"vLLM {verdict.version}: start-up batches read past their rows (lengths set at {where})"]
    lines += [f"  {b.line()}" for b in verdict.breaches[:6]]
    lines.append(f"  replay: {startup_check_line(f'vllm=={verdict.version}', config, capture_sizes)}")
    raise AssertionError("\n".join(lines))
