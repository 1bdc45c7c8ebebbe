"""Which DCP execution the attention properties use: ``--dcp-backend inprocess|gloo|nccl``.

``inprocess`` is the simulation of :mod:`crossattn_sizing.impl.runner` (all ranks a
loop in one process). ``gloo`` and ``nccl`` run each rank in its own process,
joined by ``torch.distributed`` (:mod:`crossattn_sizing.distributed.pool`): one
pool per DCP size, started the first time a config of that size is drawn and
reused by every later example of the session. Configs with ``dcp_size == 1``
have nothing to exchange and run in process under every backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from crossattn_sizing.base.errors import HarnessError
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.distributed.driver import DistributedRunner
from crossattn_sizing.distributed.pool import BACKENDS, RankPool
from crossattn_sizing.impl import Impl
from crossattn_sizing.impl.runner import PagedRunner

CHOICES = ("inprocess", *BACKENDS)
RunnerFactory = Callable[..., Any]
"""``(config, widths, impl, **PagedRunner keywords) -> runner``: PagedRunner or DistributedRunner."""


class DistributedDcp:
    """The pools of one backend and implementation, by DCP size; a runner factory."""

    def __init__(self, backend: str, impl_spec: str, device: str = "cpu", timeout_s: float = 120.0) -> None:
        if backend not in BACKENDS:
            raise HarnessError(f"--dcp-backend {backend!r}: use one of {', '.join(CHOICES)}")
        if backend == "nccl" and device != "cuda":
            raise HarnessError("--dcp-backend nccl needs --device cuda (gloo is the CPU backend)")
        if timeout_s <= 0:
            raise HarnessError(f"--dcp-timeout={timeout_s}: must be > 0 seconds")
        self.backend = backend
        self.impl_spec = impl_spec
        self.device = device
        self.timeout_s = timeout_s
        self.pools: dict[int, RankPool] = {}

    def pool(self, dcp_size: int) -> RankPool:
        """The rank processes for ``dcp_size`` ranks, started once and reused by later scenarios."""
        if dcp_size not in self.pools:
            self.pools[dcp_size] = RankPool(self.backend, dcp_size, self.impl_spec, self.device,
                                            self.timeout_s)
        return self.pools[dcp_size]

    def __call__(self, config: RunnerConfig, widths: Sequence[int], impl: Impl, **kwargs: Any) -> Any:
        """A runner for ``config``: in process without DCP, over the rank processes with it."""
        if config.dcp_size == 1:
            return PagedRunner(config, widths, impl, **kwargs)
        return DistributedRunner(self.pool(config.dcp_size), config, widths, impl, **kwargs)

    def close(self) -> None:
        """End every pool's rank processes."""
        for pool in self.pools.values():
            pool.close()


def runner_factory(backend: str, impl_spec: str, device: str = "cpu",
                   timeout_s: float = 120.0) -> RunnerFactory:
    """``PagedRunner`` for ``inprocess``, else a :class:`DistributedDcp` (close it when done)."""
    if backend == "inprocess":
        return PagedRunner
    return DistributedDcp(backend, impl_spec, device, timeout_s)
