"""DCP over real processes: each rank a ``torch.distributed`` worker with its own KV-cache shard.

:mod:`~crossattn_sizing.distributed.rank` (one rank), :mod:`~crossattn_sizing.distributed.pool`
(the process group, failures naming the rank, teardown),
:mod:`~crossattn_sizing.distributed.driver` (the driver's runner),
:mod:`~crossattn_sizing.distributed.backend` (``--dcp-backend``).
"""
