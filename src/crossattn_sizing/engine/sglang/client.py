"""``sglang==X`` and ``sglang@PATH`` as the harness uses them: a worker per tree, asked about batches.

:func:`sglang_worker` resolves the spec (a tree in place, or the release's
wheel unpacked into the engine cache, :mod:`crossattn_sizing.engine.sglang.install`),
starts one worker process for it (:mod:`crossattn_sizing.engine.sglang.worker`)
and keeps it for the process, as vLLM's are kept
(:mod:`crossattn_sizing.engine.client`: same crash handling, closed at exit).
:class:`SglangReads` is the read-side judge the property and the commands
call: the release's own metadata builder on one batch, on the eager path and
on CUDA-graph replay.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.core.admission_rules import AdmissionUnanswered, EngineRequest
from crossattn_sizing.engine.client import EngineCrash, EngineWorker, kept_worker
from crossattn_sizing.engine.install import Release
from crossattn_sizing.engine.sglang.attention_client import pack
from crossattn_sizing.engine.sglang.install import resolve_sglang
from crossattn_sizing.engine.sglang.startup_client import PATHS as STARTUP_PATHS
from crossattn_sizing.engine.sglang.startup_client import StartupServer

DID_NOT_RETURN = "the tree's code did not return"
"""The headline of a step that ended its worker (a hang's headline names the deadline and the step)."""


def did_not_return(exc: EngineCrash) -> dict[str, Any]:
    """The "fails" verdict of a step whose code hung past its deadline or ended its worker.

    Why one place: the read, write and attention sides each report it, and a timeout's own headline
    (the deadline and the step it stopped in) must reach every one of them.
    """
    return {"verdict": "fails", "headline": getattr(exc, "headline", DID_NOT_RETURN),
            "message": f"{DID_NOT_RETURN}: {exc}"}

LOAD_DEADLINE_S = 120.0
"""Seconds a tree's worker may take to load (parse and define the release's files) before it is killed."""

PATHS = ("eager", "replay")
"""FlashAttentionBackend's two ways to build decode metadata: ``init_forward_metadata``, CUDA-graph replay."""


@dataclass
class SglangTree(Release):
    """A resolved SGLang tree; ``spec`` is what the user typed (for labels and replay commands)."""

    spec: str = ""
    note: str = ""

    @property
    def label(self) -> str:
        """How error lines name the tree: its spec."""
        return self.spec


class SglangWorker(EngineWorker):
    """A worker running ``crossattn_sizing.engine.sglang.worker`` on one tree."""

    def _spawn(self) -> dict[str, Any]:
        cmd = [sys.executable, "-m", "crossattn_sizing.engine.sglang.worker", "--root", self.release.paths[0]]
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (lives as long as the worker)
        # The decode-metadata Triton kernel runs in Triton's interpreter; no CUDA device is looked for.
        env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
        self.proc = subprocess.Popen(  # its own group, so a deadline ends it with all it started
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env,
            start_new_session=self.deadline is not None,
        )
        # Loading parses and defines the tree's files (seconds, more on a busy machine): it gets
        # LOAD_DEADLINE_S or the call deadline, whichever is longer; a tree whose loading hangs is
        # killed then.
        load = None if self.deadline is None else max(self.deadline, LOAD_DEADLINE_S)
        line = self._read_line(self.proc, load)
        if not line:
            self.proc.wait()
            tail = self.stderr_tail()
            raise ReleaseUnavailable(f"{self.release.label}: the worker died while loading: {tail}")
        import json

        ready = json.loads(line)
        if not ready.get("ready"):  # not a missing module to install: the tree itself is unusable
            self.close()
            raise ReleaseUnavailable(f"{self.release.label}: {ready.get('error')}")
        return ready


_WORKERS: dict[str, SglangWorker] = {}


def sglang_worker(
    spec: str, deadline: float | None = None, *, offline: bool | None = None, cache: Path | None = None
) -> SglangWorker:
    """The shared, started worker of the tree ``spec`` names (closed at exit with every worker).

    Every call into the tree runs under ``deadline`` seconds (a command's ``--call-timeout``; None: its
    setting, :func:`~crossattn_sizing.base.settings.call_timeout`, for a worker started now), as a
    ``module:attr`` worker's does: past it the worker's process group is killed and the call raises
    :class:`~crossattn_sizing.engine.client.CallTimeout`; a worker that exits raises
    :class:`~crossattn_sizing.engine.client.EngineCrash`. The next call starts a fresh worker.
    """
    def make(spec: str, deadline: float) -> SglangWorker:
        root, note = resolve_sglang(spec, offline=offline, cache=cache)
        return SglangWorker(SglangTree(None, [str(root)], spec=spec, note=note), "cpu", records=False,
                            deadline=deadline)

    return kept_worker(_WORKERS, spec, deadline, make)


@dataclass
class SglangReads:
    """The read-side judge for one SGLang tree: its own metadata builder on a batch, each path."""

    spec: str
    paths: tuple[str, ...] = PATHS
    deadline: float | None = None
    """Seconds each call into the tree may take (``--call-timeout``); None: the worker's own."""

    @property
    def name(self) -> str:
        """How reports name the read-side judge: its tree's spec."""
        return self.spec

    def verdicts(self, context_len: int, batch: Sequence[Sequence[int]]) -> dict[str, dict[str, Any]]:
        """``path -> verdict`` (``holds``, ``fails`` with row/column/width, ``not run`` with the reason).

        A tree whose step hangs past the deadline or ends its process fails the batch (the step is the
        tree's own code), reported in one line.
        """
        worker = sglang_worker(self.spec, self.deadline)
        try:
            reads = worker.ask("read", context_len=context_len, batch=[list(r) for r in batch])
        except EngineCrash as exc:
            hung = did_not_return(exc)
            return {path: {"row": -1, "column": -1, "width": -1, **hung} for path in self.paths}
        except ReleaseUnavailable as exc:  # the worker answered with an error: the adapter's, not run
            return {path: {"verdict": "not run", "reason": f"the worker could not answer: {exc}"}
                    for path in self.paths}
        return {path: verdict for path, verdict in reads["paths"].items() if path in self.paths}

    def write(self, context_len: int, batch: Sequence[Sequence[int]]) -> dict[str, Any]:
        """The write side of ``batch`` on the tree's own rows (``holds`` / ``fails`` / ``not run``)."""
        try:
            return sglang_worker(self.spec, self.deadline).ask("write", context_len=context_len,
                                                    batch=[list(r) for r in batch])
        except EngineCrash as exc:
            return did_not_return(exc)
        except ReleaseUnavailable as exc:  # the worker answered with an error: the adapter's, not run
            return {"verdict": "not run", "reason": f"the worker could not answer: {exc}"}

    def admission(self, context_len: int, kv_capacity: int) -> OwnAdmission | dict[str, Any]:
        """The tree's own admission rule for this server (:class:`OwnAdmission`), or the verdict
        (``fails``: the tree's code hung or ended its worker; ``not run``: a piece the harness cannot
        run, named) when its admission steps do not answer."""
        rule = OwnAdmission(self.spec, context_len, kv_capacity, max_req_len=0, max_req_input_len=0,
                            deadline=self.deadline)
        try:
            answer = rule.ask([])
        except AdmissionUnanswered as exc:
            return exc.verdict
        rule.max_req_len, rule.max_req_input_len = answer["max_req_len"], answer["max_req_input_len"]
        rule.row_width = answer.get("row_width")
        return rule

    def attention(self) -> SglangAttention:
        """The tree's attention step (:class:`SglangAttention`), under the same deadline."""
        return SglangAttention(self.spec, self.deadline)

    def startup(self) -> SglangStartup:
        """The tree's start-up judge (:class:`SglangStartup`), under the same deadline."""
        return SglangStartup(self.spec, self.deadline)

    def first_problem(
        self, context_len: int, batch: Sequence[Sequence[int]]
    ) -> tuple[str, str] | None:
        """``("fails" | "not run", line)`` for the first path that does not hold; None when all hold."""
        found = self.first_finding(context_len, batch)
        return None if found is None else found[:2]

    def first_finding(
        self, context_len: int, batch: Sequence[Sequence[int]]
    ) -> tuple[str, str, str] | None:
        """:meth:`first_problem` with the failing step's headline (``""`` for "not run"). A path that
        fails is said before one that did not run (a release refusing the batch on its eager path may still
        read wrong on replay)."""
        verdicts = self.verdicts(context_len, batch)
        for path, verdict in verdicts.items():
            if verdict["verdict"] == "fails":
                return "fails", f"{path}: {verdict['message']}", str(verdict.get("headline", ""))
        for path, verdict in verdicts.items():
            if verdict["verdict"] == "not run":  # the release is named: which one the harness could not run
                return "not run", f"{path}: not run: {self.spec}: {verdict['reason']}", ""
        return None


@dataclass
class OwnAdmission:
    """SGLang's admission for one server as the tree's own code decides it (the
    :class:`~crossattn_sizing.core.admission_rules.AdmissionRule` protocol, answered by its worker).

    ``max_req_len`` and ``max_req_input_len`` are what the tree's ``TpModelWorker`` reports; a request
    is refused by the tree's ``validate_input_length`` (or aborted by its ``init_req_max_new_tokens``),
    and its output is capped by ``init_req_max_new_tokens`` (:mod:`crossattn_sizing.engine.sglang.admission`).
    Each request is asked once and its answer kept.
    """

    spec: str
    context_len: int
    kv_capacity: int
    max_req_len: int
    max_req_input_len: int
    row_width: int | None = None
    """The tree's own row (``context_len`` + its sizing's extra), for a failure's lines; None: unknown."""
    deadline: float | None = None
    name: str = "sglang"
    _answers: dict[EngineRequest, dict[str, Any]] = field(default_factory=dict, repr=False)

    @property
    def input_draw_limit(self) -> int:
        """The longest input a strategy offers: ``max_req_len``, so the tree's own check decides the
        inputs from ``max_req_input_len`` on, not the harness."""
        return self.max_req_len

    def ask(self, requests: Sequence[EngineRequest]) -> dict[str, Any]:
        """The worker's ``admission`` answer for ``requests``; :class:`AdmissionUnanswered` when the
        tree's steps did not answer (its code hung or exited: ``fails``; the harness's gap: ``not run``)."""
        try:
            answer: dict[str, Any] = sglang_worker(self.spec, self.deadline).ask(
                "admission", context_len=self.context_len, kv_capacity=self.kv_capacity,
                requests=[[r.encoder_len, r.prompt_len, r.max_new] for r in requests])
        except EngineCrash as exc:
            raise AdmissionUnanswered({"verdict": "fails", "message": "the tree's admission code did not "
                                       f"return: {exc}"}) from None
        except ReleaseUnavailable as exc:  # the worker answered with an error: the adapter's, not run
            raise AdmissionUnanswered({"verdict": "not run",
                                       "reason": f"the worker could not answer: {exc}"}) from None
        if answer["verdict"] != "holds":
            raise AdmissionUnanswered(answer)
        return answer

    def _answer(self, request: EngineRequest) -> dict[str, Any]:
        if request not in self._answers:
            self._answers[request] = self.ask([request])["requests"][0]
        return self._answers[request]

    def refusal(self, request: EngineRequest) -> str | None:
        """The tree's own message refusing ``request``, or None when it admits it."""
        refused = self._answer(request)["refused"]
        return None if refused is None else str(refused)

    def output_cap(self, request: EngineRequest) -> int:
        """The ``max_new_tokens`` the tree's scheduler lets ``request`` run to."""
        return int(self._answer(request)["cap"])


@dataclass
class SglangAttention:
    """The judge's side of one SGLang tree's attention step: its own TorchNativeAttnBackend on a batch, in
    its worker (the content packed by :func:`~crossattn_sizing.engine.sglang.attention_client.pack`)."""

    spec: str
    deadline: float | None = None
    """Seconds each call into the tree may take (``--call-timeout``); None: the worker's own."""

    pack = staticmethod(pack)
    """How the payload's tensors travel (the property packs its content with it)."""

    @property
    def name(self) -> str:
        """How reports name the tree: its spec."""
        return self.spec

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The worker's answer: ``ran`` with the outputs, ``fails`` (the release's extend output is not the
        draw's, or its code did not return within the deadline) or ``not run`` with the reason."""
        try:
            return sglang_worker(self.spec, self.deadline).ask("attention", **payload)
        except EngineCrash as exc:  # the tree's own code hung (its step and the deadline named) or left
            return did_not_return(exc)
        except ReleaseUnavailable as exc:  # the worker answered with an error: the adapter's, not run
            return {"verdict": "not run", "reason": f"the worker could not answer: {exc}"}


@dataclass
class SglangStartup:
    """The judge's side of one SGLang tree's start-up batches: its own runner fill and FA3 capture code, in
    its worker (the servers are :class:`~crossattn_sizing.core.startup_server.StartupServer`)."""

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
        try:
            answer = sglang_worker(self.spec, self.deadline).ask(
                "startup", context_len=server.context_len, capture_bs=list(server.capture_bs),
                max_running=server.max_running, max_source_positions=server.max_source_positions)
        except EngineCrash as exc:
            return dict.fromkeys(STARTUP_PATHS, did_not_return(exc))
        except ReleaseUnavailable as exc:  # the worker answered with an error: the adapter's, not run
            reason = f"the worker could not answer: {exc}"
            return {path: {"verdict": "not run", "reason": reason} for path in STARTUP_PATHS}
        return {path: answer["paths"][path] for path in STARTUP_PATHS}
