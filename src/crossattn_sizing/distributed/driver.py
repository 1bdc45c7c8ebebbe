"""The driver's side of a distributed DCP run: :class:`PagedRunner`'s steps, executed by the ranks.

:class:`DistributedRunner` has the methods the attention scenarios call on a
:class:`~crossattn_sizing.impl.runner.PagedRunner` (``append``, ``write``,
``attend``, ``tables[g].row``), and holds no cache and no table itself: each
call is sent to every rank of a :class:`~crossattn_sizing.distributed.pool.RankPool`,
where a runner holding that rank only does the work and the ranks exchange
their partial attention through ``torch.distributed``. Every rank ends up with
the merged output (all-gather, then merge, as the engine does); the driver
checks that all ranks agree and returns it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.distributed.pool import RankPool
from crossattn_sizing.impl import Impl
from crossattn_sizing.impl.runner import Reads


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN included (a poisoned read must look the same on every rank)."""
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())
    return bool(a == b)


class RankTable:
    """``tables[g]`` of a distributed run: rows are read from the ranks' own copies."""

    def __init__(self, owner: DistributedRunner, g: int) -> None:
        self.owner = owner
        self.g = g

    def row(self, row: int) -> list[int]:
        """The row as every rank holds it (the ranks must agree)."""
        return self.owner.agreed("row", self.g, row)


class DistributedRunner:
    """A scenario's runner whose DCP ranks are the processes of ``pool``."""

    def __init__(self, pool: RankPool, config: RunnerConfig, widths: Sequence[int], impl: Impl,
                 **kwargs: Any) -> None:
        if config.dcp_size != pool.dcp_size:
            raise ValueError(f"config has dcp_size {config.dcp_size}; the pool has {pool.dcp_size} ranks")
        self.pool = pool
        self.config = config
        self.widths = tuple(widths)
        self.impl = impl
        self.dtype: torch.dtype = kwargs.get("dtype", torch.float32)
        self.scale = 1.0 / math.sqrt(kwargs.get("head_dim", 4))
        self.tables = [RankTable(self, g) for g in range(len(config.groups))]
        pool.call("open", config, self.widths, kwargs)

    def agreed(self, op: str, *payload: Any) -> Any:
        """Every rank's answer to ``op``, which must be the same on all ranks; rank 0's is returned."""
        answers = self.pool.call(op, *payload)
        for rank, answer in enumerate(answers[1:], start=1):
            if not _same(answers[0], answer):
                raise AssertionError(
                    f"DCP ranks disagree after {op!r}: rank {rank}'s result differs from rank 0's "
                    f"({self.pool.backend}, {self.pool.dcp_size} ranks); every rank must hold the same "
                    "block tables and, after the all-gather, the same merged output"
                )
        return answers[0]

    def append(self, g: int, row: int, manager_ids: Sequence[int]) -> list[int]:
        """Append blocks to a row on every rank; the row they agree on."""
        return self.agreed("append", g, row, list(manager_ids))

    def write(self, g: int, rows: Sequence[int], positions: Sequence[Any], keys: Sequence[torch.Tensor],
              values: Sequence[torch.Tensor]) -> None:
        """Write keys and values on every rank (each keeps its own shard)."""
        cpu = [k.cpu() for k in keys], [v.cpu() for v in values]
        self.pool.call("write", g, list(rows), list(positions), *cpu)

    def attend(self, g: int, reads: Reads) -> torch.Tensor:
        """Attention over the ranks' shards, merged as DCP does; the ranks must agree on the result."""
        return self.agreed("attend", g, reads.on_cpu())
