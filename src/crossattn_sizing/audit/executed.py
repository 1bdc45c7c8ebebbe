"""The audit's executed path: a release's runner sizing (V2, and 0.34's CPU runner) run for real, as a policy.

``audit`` reads the sizing out of the source by default; where the adapter
can run the release (its wheel unpacked, its import chain complete), the V2
runner's widths come from executing ``initialize_kv_cache`` instead, and the
verdict says so. :func:`executed_v2` returns the policy or, when the release
cannot run here, ``None`` and the reason, so the audit falls back to reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from crossattn_sizing.audit.extract import ReadError
from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.engine.interface import ExecutesSizing
from crossattn_sizing.engine.registry import family

AUDITED = "vllm"
"""The engine family whose sizing the audit reads and executes (its executed path: ``ExecutesSizing``)."""


def audited() -> ExecutesSizing:
    """The audited family, as the executed path uses it (its sub-package imported now)."""
    return cast("ExecutesSizing", family(AUDITED))


def executed_runner_files() -> Mapping[str, tuple[str, str]]:
    """``runner -> (file, class)`` the adapter executes (the audited family's
    :attr:`~crossattn_sizing.engine.interface.ExecutesSizing.executed_runners`)."""
    return audited().executed_runners


class ExecutedPolicy:
    """What the audit's checks need of a policy: its widths and ``where`` they come from.

    No conditions and no kernel-block mentions: executed widths come from the
    release's own BlockTables, whose row length in entries is measured, so
    the audit's "which ids a row stores" question is answered by the widths alone.
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        path, class_name = executed_runner_files()[getattr(policy, "runner", "v2")]
        self.where = f"executed: {path} {class_name}.initialize_kv_cache (vLLM {policy.version})"

    def __call__(self, config: RunnerConfig) -> tuple[int, ...]:
        """The widths the release's own sizing code gives ``config``, executed in its worker."""
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
        except ReleaseUnavailable as exc:  # the release's code failed on this config: say so, exactly
            raise ReadError(f"{self.where}: {exc}") from None


def executed_runners(
    version: str, runners: list[str], *, offline: bool = False, cache_dir: Path | None = None
) -> dict[str, tuple[ExecutedPolicy | None, str]]:
    """Each of ``runners`` that the adapter executes (V2 and 0.34's CPU runner), as :func:`executed_v2`.

    One worker serves them all (the same release). A release without a
    runner's file gets ``None`` and the reason, like a release that cannot
    run here; the audit's reading then says whether the runner is there.
    """
    return {r: executed_v2(version, offline=offline, cache_dir=cache_dir, runner=r)
            for r in runners if r in executed_runner_files()}  # fmt: skip


def executed_v2(
    version: str, *, offline: bool = False, cache_dir: Path | None = None, runner: str = "v2"
) -> tuple[ExecutedPolicy | None, str]:
    """The executed V2 policy of ``version`` (``X``, ``vllm==X`` or ``vllm@PATH``), or None and why not.

    ``cache_dir`` is the audit's ``--cache-dir``: the wheel is taken from there (never from the
    default cache under the home folder), and the release is unpacked inside it. ``runner``:
    another runner's copy of the sizing (a key of
    :func:`executed_runner_files`).
    """
    try:
        from crossattn_sizing.engine.client import EngineCrash

        make = audited().executed_policy
    except ImportError as exc:  # the audit session installs no torch: reading is the only path
        return None, f"the engine adapter needs torch ({exc})"
    try:
        from crossattn_sizing.audit.verdicts import NEMOTRON

        try:
            policy = make(version, runner, wheel_cache=cache_dir, offline=offline or None)
        except ImportError as exc:  # the adapter imports torch when first used
            return None, f"the engine adapter needs torch ({exc})"
        policy(NEMOTRON)  # a release whose sizing cannot run here falls back before the sweep
        return ExecutedPolicy(policy), ""
    # e.g. the wheel is only in --cache-dir, or its sizing ended its worker or outlived the call deadline
    # (CROSSATTN_CALL_TIMEOUT): read it instead, saying why
    except (ReleaseUnavailable, EngineCrash) as exc:
        return None, str(exc)
