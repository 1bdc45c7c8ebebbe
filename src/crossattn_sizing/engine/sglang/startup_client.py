"""The harness's side of SGLang's start-up batches: the paths judged and the line replaying a server.

A :class:`~crossattn_sizing.core.startup_server.StartupServer` is what shapes
the CUDA-graph runner's dummy batches (it lives in ``core/``, so the properties
draw it without importing the family);
:class:`~crossattn_sizing.engine.sglang.client.SglangStartup` asks the tree's
worker to run its own code on one (:mod:`crossattn_sizing.engine.sglang.startup`)
and returns the verdict of each of :data:`PATHS`; :func:`check_line` is the
command that replays one server. No torch here.
"""

from __future__ import annotations

from crossattn_sizing.core.startup_server import StartupServer
from crossattn_sizing.core.startup_server import server_check_line as check_line

PATHS = ("capture", "replay")
"""The start-up batch's two ways through FA3's ``init_forward_metadata_out_graph``: with ``in_capture=True``
(the capture) and without it (a padded slot at replay)."""


__all__ = ["PATHS", "StartupServer", "check_line"]
