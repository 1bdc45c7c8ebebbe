"""The audit's executed path: a release's ModelRunner V2 sizing run for real, in the audit's policy shape.

``audit`` reads the sizing out of the source by default; where the adapter
can run the release (its wheel unpacked, its import chain complete), the V2
runner's widths come from executing ``initialize_kv_cache`` instead, and the
verdict says so. :func:`executed_v2` returns the policy or, when the release
cannot run here, ``None`` and the reason, so the audit falls back to reading.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crossattn_sizing.audit.extract import ReadError
from crossattn_sizing.audit.sources import FetchError
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.engine.install import EngineError
from crossattn_sizing.engine.sizing_exec import RUNNER_PATH


class ExecutedPolicy:
    """What the audit's checks need of a policy: its widths and ``where`` they come from.

    No conditions and no kernel-block mentions: executed widths come from the
    release's own BlockTables, whose row length in entries is measured, so
    the audit's "which ids a row stores" question is answered by the widths alone.
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.where = f"executed: {RUNNER_PATH} GPUModelRunner.initialize_kv_cache (vLLM {policy.version})"

    def __call__(self, config: RunnerConfig) -> tuple[int, ...]:
        from crossattn_sizing.audit.verdicts import manager_twin
        from crossattn_sizing.engine.client import Inexpressible

        try:
            try:
                return self.policy(config)
            except Inexpressible:
                if all(g.kbs == g.block_size for g in config.groups):
                    raise
                # The release's table takes no kernel block size: its rows hold ids of whole
                # blocks, which the audit recognises (widths equal to the manager twin's).
                return self.policy(manager_twin(config))
        except EngineError as exc:  # the release's code failed on this config: say so, exactly
            raise ReadError(f"{self.where}: {exc}") from None


def executed_v2(
    version: str, *, offline: bool = False, cache_dir: Path | None = None
) -> tuple[ExecutedPolicy | None, str]:
    """The executed V2 policy of ``version`` (``X``, ``vllm==X`` or ``vllm@PATH``), or None and why not.

    ``cache_dir`` is the audit's ``--cache-dir``: the wheel is taken from there (never from the
    default cache under the home folder), and the release is unpacked inside it.
    """
    try:
        from crossattn_sizing.engine.client import worker_for
        from crossattn_sizing.engine.vllm import VllmPolicy, normalise
    except ImportError as exc:  # the audit session installs no torch: reading is the only path
        return None, f"the engine adapter needs torch ({exc})"
    try:
        from crossattn_sizing.audit.verdicts import NEMOTRON

        spec = normalise(version)  # a bare X is vllm==X
        worker = worker_for(spec, "cpu", wheel_cache=cache_dir, offline=offline or None)
        policy = VllmPolicy(spec, worker=worker)
        policy(NEMOTRON)  # a release whose sizing cannot run here falls back before the sweep
        return ExecutedPolicy(policy), ""
    except (EngineError, FetchError) as exc:  # e.g. the wheel is only in --cache-dir: read it instead
        return None, str(exc)
