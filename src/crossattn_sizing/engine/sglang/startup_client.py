"""The harness's side of SGLang's start-up batches: one server's settings, asked of a tree's worker.

A :class:`StartupServer` is what shapes the CUDA-graph runner's dummy batches
(the context length, the capture sizes, ``--max-running-requests``, and the
encoder budget the model's config declares, ``max_source_positions``).
:class:`SglangStartup` asks the tree's worker to run its own code on them
(:mod:`crossattn_sizing.engine.sglang.startup`) and returns each path's
verdict; :func:`check_line` is the command that replays one server.
No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crossattn_sizing.base.errors import ReleaseUnavailable

PATHS = ("capture", "replay")
"""The start-up batch's two ways through FA3's ``init_forward_metadata_out_graph``: with ``in_capture=True``
(the capture) and without it (a padded slot at replay)."""


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


def check_line(spec: str, server: StartupServer) -> str:
    """The ``check`` command that replays ``server``'s start-up batches on the tree ``spec``."""
    import shlex

    return " ".join(["crossattn-sizing", "check", "--engine", shlex.quote(spec), *server.check_args()])


@dataclass
class SglangStartup:
    """The start-up judge for one SGLang tree: its own runner fill and FA3 capture code, in its worker."""

    spec: str
    deadline: float | None = None
    """Seconds each call into the tree may take (``--call-timeout``); None: the worker's own."""

    @property
    def name(self) -> str:
        """How reports name the tree: its spec."""
        return self.spec

    def verdicts(self, server: StartupServer) -> dict[str, dict[str, Any]]:
        """``path -> verdict`` for the dummy batches of ``server`` (``holds``, ``fails`` with the release's
        ``file:line`` in ``where``, ``not run`` with the reason); a tree whose code hangs or ends its worker
        fails each path in one line (the step is the tree's own code)."""
        from crossattn_sizing.engine.client import EngineCrash
        from crossattn_sizing.engine.sglang.client import did_not_return, sglang_worker

        try:
            answer = sglang_worker(self.spec, self.deadline).ask(
                "startup", context_len=server.context_len, capture_bs=list(server.capture_bs),
                max_running=server.max_running, max_source_positions=server.max_source_positions)
        except EngineCrash as exc:
            return dict.fromkeys(PATHS, did_not_return(exc))
        except ReleaseUnavailable as exc:  # the worker answered with an error: the adapter's, not run
            reason = f"the worker could not answer: {exc}"
            return {path: {"verdict": "not run", "reason": reason} for path in PATHS}
        return {path: answer["paths"][path] for path in PATHS}


__all__ = ["PATHS", "SglangStartup", "StartupServer", "check_line"]
