"""The judge's side of ``tensorrt_llm@PATH``: a worker per tree, asked how long the cross pool is.

:func:`tensorrt_llm_worker` resolves the spec (the tree in place, read and
compiled once here to refuse a tree without the sizing in one line before any
work), starts one worker (:mod:`crossattn_sizing.engine.tensorrt_llm.worker`)
and keeps it for the process, as SGLang's are kept (closed at exit with every
worker). Each call has the usual deadline (``CROSSATTN_CALL_TIMEOUT``): past it
the worker's process group is killed. :class:`TrtllmCrossPool` is what the
capacity property and the commands call.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.core.cross_pool import CrossPoolCase, CrossPoolNotRun
from crossattn_sizing.engine.client import EngineCrash, EngineWorker, kept_worker
from crossattn_sizing.engine.install import Release
from crossattn_sizing.engine.tensorrt_llm.source import QUALNAME, read_layout_source, tensorrt_llm_tree_root


@dataclass
class TrtllmTree(Release):
    """A resolved TensorRT-LLM tree; ``spec`` is what the user typed (for labels and replay lines)."""

    spec: str = ""

    @property
    def label(self) -> str:
        """How error lines name the tree: its spec."""
        return self.spec


class TrtllmWorker(EngineWorker):
    """A worker running ``crossattn_sizing.engine.tensorrt_llm.worker`` on one tree, with a deadline."""

    def command(self) -> list[str]:
        """The worker's command line: the loop and the tree."""
        return [
            sys.executable,
            "-m",
            "crossattn_sizing.engine.tensorrt_llm.worker",
            "--root",
            self.release.paths[0],
        ]

    def _spawn(self) -> dict[str, Any]:
        """One start of the worker; one that dies or hangs before its ready line is "not run".

        The tree was read in the judge first (a tree the harness cannot use is refused then), and the
        worker runs the tree's code before it is ready (building the class runs its decorators and
        default values): a worker lost then is the tree's code stopping it, never bad input.
        """
        try:
            return super()._spawn()
        except ReleaseUnavailable as exc:
            said = str(exc).rstrip(": ")  # no stderr tail: no dangling colon
            raise CrossPoolNotRun(f"{said} (the tree's code runs there while its class is built)") from None

    def start(self) -> dict[str, Any]:
        """Start the worker; a tree it cannot load is one line (nothing is installed for it)."""
        label = self.release.label
        return self.start_once(
            lambda ready: ReleaseUnavailable(f"{label}: {ready.get('said') or ready.get('error')}")
        )


_WORKERS: dict[str, TrtllmWorker] = {}


def tensorrt_llm_worker(spec: str, deadline: float | None = None) -> TrtllmWorker:
    """The shared, started worker of the tree ``spec`` names; bad input is one :class:`ReleaseUnavailable`.

    ``deadline``: seconds each call may take (``--call-timeout``, on a started worker too), else
    ``CROSSATTN_CALL_TIMEOUT`` (:func:`~crossattn_sizing.engine.client.kept_worker`). A file the
    harness's parser gives up on is :class:`CrossPoolNotRun` naming the tree: nothing was asked.
    """

    def make(spec: str, deadline: float) -> TrtllmWorker:
        root = tensorrt_llm_tree_root(spec)
        try:  # parsed, not run: a tree without the sizing is refused before any work
            read_layout_source(root)
        except CrossPoolNotRun as exc:
            raise CrossPoolNotRun(f"{spec}: {exc}") from None
        worker = TrtllmWorker(
            TrtllmTree(None, [str(root)], spec=spec), "cpu", records=False, deadline=deadline
        )
        worker.start_deadline = max(deadline, 30.0)
        return worker

    return kept_worker(_WORKERS, spec, deadline, make)


@dataclass
class TrtllmCrossPool:
    """The cross-pool sizer of one TensorRT-LLM tree: its own ``_get_cross_kv_cache_layout``, in a worker."""

    spec: str

    @property
    def name(self) -> str:
        """How reports name the sizer: its tree's spec."""
        return self.spec.strip()

    @property
    def function(self) -> str:
        """Whose code sizes the pool, for report headers."""
        return f"{QUALNAME} (tensorrt_llm/_torch/pyexecutor/_util.py, executed from the tree)"

    def layout(self, case: CrossPoolCase) -> tuple[int, int, int, int]:
        """``(num_layers, num_kv_heads, head_dim, max_seq_len)`` as the tree's code returns them for ``case``.

        Raises :class:`CrossPoolNotRun` when it could not say (its code raised,
        a stand-in was used, its signature changed, the worker died or timed out).
        """
        a, b, c, d = self._ask("layout", case)["layout"]
        return a, b, c, d

    def executed_lines(self, case: CrossPoolCase) -> list[int]:
        """The line numbers of the tree's ``_get_cross_kv_cache_layout`` that ran for ``case`` (its file's
        own numbering); :class:`CrossPoolNotRun` as :meth:`layout`."""
        return [int(n) for n in self._ask("traced_layout", case)["lines"]]

    def _ask(self, op: str, case: CrossPoolCase) -> dict[str, Any]:
        """The worker's answer to ``op`` for ``case``, when the tree's code ran."""
        worker = tensorrt_llm_worker(self.spec)
        try:
            verdict = worker.request(op, hf_config=dict(case.hf_config), max_seq_len=case.max_seq_len,
                                     max_input_len=case.max_input_len)  # fmt: skip
        except (EngineCrash, ReleaseUnavailable) as exc:  # a timeout is an EngineCrash too
            raise CrossPoolNotRun(f"{self.name}: {exc}") from None
        if verdict["verdict"] != "ran":
            raise CrossPoolNotRun(f"{self.name}: {verdict['reason']}")
        return dict(verdict)

    def pool_len(self, case: CrossPoolCase) -> int:
        """The cross pool's maximum sequence length the tree's sizing gives for ``case``."""
        return self.layout(case)[3]

    def __repr__(self) -> str:  # short: Hypothesis prints it in a falsifying example
        return f"TrtllmCrossPool({json.dumps(self.name)})"
