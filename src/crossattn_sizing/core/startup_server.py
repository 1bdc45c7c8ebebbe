"""One SGLang server's start-up settings: what shapes its CUDA-graph runner's dummy batches (no torch).

The context length, the capture sizes (``--cuda-graph-bs``), ``--max-running-requests`` and the encoder
budget the model's config declares (``max_source_positions``). Drawn by the properties
(``properties/sglang_startup_strategies.py``) and asked of a tree's worker by the SGLang family
(``engine/sglang/startup_client.py``); here, below both, so the properties never import the family.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class StartupServer:
    """The settings that shape SGLang's start-up batches."""

    context_len: int
    capture_bs: tuple[int, ...]
    max_running: int
    max_source_positions: int | None
    """The model config's ``max_source_positions``; None: its config declares none (Mllama's)."""

    def lines(self) -> list[str]:
        """The server, for a failure's diagnosis."""
        source = "none declared" if self.max_source_positions is None else str(self.max_source_positions)
        return [f"  server: --context-length {self.context_len}, --max-running-requests {self.max_running}, "
                f"--cuda-graph-bs {' '.join(map(str, self.capture_bs))}, page size 1; model config "
                f"max_source_positions: {source}"]

    def check_args(self) -> list[str]:
        """The ``check --engine sglang...`` options replaying this server."""
        out = ["--context-len", str(self.context_len), "--max-running-requests", str(self.max_running),
               "--cuda-graph-bs", ",".join(map(str, self.capture_bs))]
        if self.max_source_positions is not None:
            out += ["--max-source-positions", str(self.max_source_positions)]
        return out


def server_check_line(spec: str, server: StartupServer) -> str:
    """The ``check`` command that replays ``server``'s start-up batches on the tree ``spec``."""
    return " ".join(["crossattn-sizing", "check", "--engine", shlex.quote(spec), *server.check_args()])
