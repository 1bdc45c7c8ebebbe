"""A second process for verify's shared run: some of the suite's tests, on another core.

Why: the shared run (:mod:`crossattn_sizing.runs.shared_run`) is one pytest
session; its tests are independent (each test draws its examples from
its own seed), so verify runs some of them here while it runs the rest
itself. The split is not invisible, though: besides its seed, Hypothesis
draws literal constants from the project's modules a process has imported so
far, and which those are depends on the tests that process ran before. So
``--jobs 1`` and ``--jobs 2`` can meet different examples (other event counts,
another first failing example before shrinking); every pair of runs measured
gave the same outcomes, and a failure's ``@reproduce_failure`` line replays
its example in any process.

``python -m crossattn_sizing.runs.share_process REQUEST.json RESULT.json``: the
request names the policies, the files and verify's options; the result holds
the per-property results, the shared run's state
(:meth:`~crossattn_sizing.runs.shared_run.SharedPolicies.to_json`), whether Ctrl-C
stopped it, and any bad input met (re-raised by the parent as the same
error). Progress goes to stdout as ``progress DONE TOTAL NODEID`` lines.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crossattn_sizing.base import interrupts
from crossattn_sizing.base.errors import HarnessError, PolicyCallError
from crossattn_sizing.base.processes import end_group, signal_group
from crossattn_sizing.base.threads import child_environment
from crossattn_sizing.findings.results import PropertyResult
from crossattn_sizing.runs.shared_run import SharedPolicies

SHARED_WEIGHTS = {
    "test_attention.py::test_cross_attention_matches_dense": 48,
    "test_attention.py::test_self_attention_matches_dense": 33,
    "test_attention.py::test_nemotron_parse_page": 2,
    "test_distributed_dcp.py": 28, "test_hf_cross_attention.py": 13, "test_dcp_finding.py": 11,
    "test_slot_mapping.py": 4, "test_read_coverage.py": 2, "test_admission.py": 2, "test_capacity.py": 1,
}  # fmt: skip
"""Seconds of each unit of verify's shared run of the 7 built-in policies (one process, near idle,
reports/bench_verify.md, 2026-12-06): a test named here is a unit of its own, so the attention file
(more than half the run: its bodies run once per distinct width) is split between the processes.
Only balances, never decides a verdict; units not listed weigh 1."""


ENGINE_WEIGHTS = {
    "test_attention.py::test_self_attention_matches_dense": 7,
    "test_attention.py::test_nemotron_parse_page": 6,
    "test_attention.py::test_cross_attention_matches_dense": 5,
    "test_distributed_dcp.py": 2, "test_hf_cross_attention.py": 2, "test_dcp_finding.py": 1,
}  # fmt: skip
"""Rough relative cost of each unit of an engine's suite run (reports/bench_engine.md: seconds of the
judge per test, the release's kernels interpreted): a test named here is a unit of its own, so the
attention file, most of the run, is split between the processes. Only balances; units not listed weigh 0."""


def balanced(units: list[str], parts: int, weight: Callable[[str], float]) -> list[list[str]]:
    """``units`` into ``parts`` groups of about equal ``weight``, heaviest first (greedy); ties by name."""
    groups: list[list[str]] = [[] for _ in range(parts)]
    load = [0.0] * parts
    for unit in sorted(units, key=lambda u: (-weight(u), u)):
        i = load.index(min(load))
        groups[i].append(unit)
        load[i] += weight(unit)
    return [g for g in groups if g]


def suite_units(files: list[Path], weights: dict[str, int] = ENGINE_WEIGHTS) -> list[str]:
    """Each file's name, or ``file::test`` for each of its top-level tests when ``weights``
    names one of them (pytest node ids relative to the properties folder, every test kept)."""
    units: list[str] = []
    for f in files:
        defs = [n.name for n in ast.parse(f.read_text()).body if isinstance(n, ast.FunctionDef)]
        tests = [f"{f.name}::{name}" for name in defs if name.startswith("test")]
        units += tests if any(t in weights for t in tests) else [f.name]
    return units


def split_units(files: list[Path], parts: int, weights: dict[str, int], unlisted: int) -> list[list[str]]:
    """The tests of ``files`` into ``parts`` groups of about equal cost by ``weights`` (``unlisted``:
    the weight of a unit it does not name).

    A unit is a file or one test (a property: all its parametrisations stay in one
    process, so its result is one process's result).
    """
    return balanced(suite_units(files, weights), parts, lambda u: weights.get(u, unlisted))


def split_tests(files: list[Path], parts: int) -> list[list[str]]:
    """One engine suite's tests into ``parts`` groups of about equal cost (:data:`ENGINE_WEIGHTS`)."""
    return split_units(files, parts, ENGINE_WEIGHTS, 0)


def split_shared(files: list[Path], parts: int) -> list[list[str]]:
    """The shared run's tests into ``parts`` groups of about equal cost (:data:`SHARED_WEIGHTS`)."""
    return split_units(files, parts, SHARED_WEIGHTS, 1)


def run_request(request: dict[str, Any], on_progress: Callable[[int, int, str], None]) -> dict[str, Any]:
    """The worker's body: the shared run over the request's files (one policy: a plain run of them),
    or the policies' own runs it names."""
    from crossattn_sizing.runs.profiles import with_max_examples
    from crossattn_sizing.runs.suite import run_suite
    from crossattn_sizing.specs.resolve import Isolation, load_checked_policy

    if "alone" in request:
        return run_alone(request, on_progress)
    specs = request["specs"]
    profile = with_max_examples(request["profile"], request["max_examples"])
    isolation = Isolation(*request["isolation"])
    several = len(specs) > 1
    sharing = SharedPolicies(specs, [load_checked_policy(s, isolation) for s in specs]) if several else None
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            results, code = run_suite(
                specs[0], impl=request["impl"], device=request["device"], profile=profile,
                seed=request["seed"], select=request["select"], only=request["files"],
                plugins=[sharing] if sharing is not None else [], on_progress=on_progress, allow_empty=True,
                extra_args=isolation.plugin_args(),
            )  # fmt: skip
    finally:
        if sharing is not None:
            sharing.restore()
    return {
        "results": [dataclasses.asdict(r) for r in results],
        "interrupted": code == 2 or interrupts.requested(),
        "sharing": sharing.to_json() if sharing is not None else None,
    }


def run_alone(request: dict[str, Any], on_progress: Callable[[int, int, str], None]) -> dict[str, Any]:
    """Each ``[spec, nodeids]`` of ``request["alone"]`` in turn: that policy's own run of those tests,
    as verify runs it in its own process (no sharing); progress counts over all of them."""
    from crossattn_sizing.runs.profiles import with_max_examples
    from crossattn_sizing.runs.suite import run_suite
    from crossattn_sizing.specs.resolve import Isolation

    profile = with_max_examples(request["profile"], request["max_examples"])
    isolation = Isolation(*request["isolation"])
    total = sum(len(nodeids) for _, nodeids in request["alone"])
    alone: dict[str, list[dict[str, Any]]] = {}
    before = 0
    interrupted = False
    for spec, nodeids in request["alone"]:

        def counted(done: int, _total: int, nodeid: str, at: int = before) -> None:
            on_progress(at + done, total, nodeid)

        with contextlib.redirect_stdout(io.StringIO()):
            results, code = run_suite(
                spec, impl=request["impl"], device=request["device"], profile=profile, seed=request["seed"],
                select=(), only=nodeids, extra_args=isolation.plugin_args(),
                on_progress=counted,
            )  # fmt: skip
        alone[spec] = [dataclasses.asdict(r) for r in results]
        before += len(nodeids)
        interrupted = code == 2 or interrupts.requested()
        if interrupted:
            break
    return {"results": [], "alone": alone, "interrupted": interrupted, "sharing": None}


def _leave_with_parent() -> None:
    """End this worker when verify is gone (a third Ctrl-C leaves verify at once, without us)."""
    import os
    import time

    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(interrupts.EXIT_STATUS)


def main(argv: list[str]) -> int:
    """Answer one shared suite request (``argv``: the request file, the answer file); progress on stdout."""
    request = json.loads(Path(argv[0]).read_text())
    out = Path(argv[1])
    threading.Thread(target=_leave_with_parent, daemon=True).start()

    def progress(done: int, total: int, nodeid: str) -> None:
        print(f"progress {done} {total} {nodeid}", flush=True)

    with interrupts.handling():
        try:
            answer = run_request(request, progress)
        except PolicyCallError as exc:
            answer = {"error": str(exc), "policy_error": True}
        except HarnessError as exc:
            answer = {"error": str(exc), "policy_error": False}
        except KeyboardInterrupt:
            answer = {"results": [], "interrupted": True, "sharing": None}
    out.write_text(json.dumps(answer))
    return 0


class ShareWorker:
    """A running worker process, its progress read on a thread, its answer read when it ends."""

    def __init__(self, request: dict[str, Any], folder: Path, on_progress: Callable[[int, int, str], None],
                 processes: int) -> None:  # fmt: skip
        """Start the worker for ``request``; ``processes``: how many judge processes run at once, itself
        included (its torch threads are its share of the cores: :mod:`crossattn_sizing.base.threads`)."""
        folder.mkdir(parents=True, exist_ok=True)
        self.request_path = folder / "request.json"
        self.result_path = folder / "result.json"
        self.request_path.write_text(json.dumps(request))
        command = [sys.executable, "-m", __name__, str(self.request_path), str(self.result_path)]
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
            env=child_environment(processes),
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, args=(on_progress,), daemon=True)
        self._reader.start()

    def _read(self, on_progress: Callable[[int, int, str], None]) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.rstrip("\n").split(" ", 3)
            if len(parts) == 4 and parts[0] == "progress":
                with contextlib.suppress(ValueError):
                    on_progress(int(parts[1]), int(parts[2]), parts[3])

    def interrupt(self) -> None:
        """SIGINT to the shared process's group: it stops as a Ctrl-C would stop it."""
        signal_group(self.proc, signal.SIGINT)

    def abandon(self) -> None:
        """End the worker now; its answer is not wanted."""
        end_group(self.proc, grace_s=5)

    def answer(self) -> tuple[dict[str, Any] | None, bool]:
        """Wait for the worker; its answer (None when Ctrl-C stopped it first) and whether it was interrupted.

        Bad input it met is raised here as the same error; a worker that died
        without answering is the run's error, named with its exit status.
        """
        stopped = False
        try:
            self.proc.wait()
        except KeyboardInterrupt:  # the parent's Ctrl-C: pass it on, then wait for what it ran
            stopped = True
            self.interrupt()
            with contextlib.suppress(KeyboardInterrupt, subprocess.TimeoutExpired):
                self.proc.wait(timeout=60)
        finally:
            end_group(self.proc, grace_s=5)
        self._reader.join(timeout=5)
        if not self.result_path.exists():
            from crossattn_sizing.base.processes import describe_exit

            if stopped:
                return None, True
            status = describe_exit(self.proc.returncode)
            raise HarnessError(f"verify's worker process ended without an answer ({status})")
        answer = json.loads(self.result_path.read_text())
        if "error" in answer:
            raise (PolicyCallError if answer["policy_error"] else HarnessError)(answer["error"])
        return answer, stopped or bool(answer["interrupted"])

    def finish(self) -> tuple[list[PropertyResult], bool, dict[str, Any] | None]:
        """A shared run's share (:meth:`answer`): its results, whether it was interrupted, its state."""
        answer, stopped = self.answer()
        if answer is None:
            return [], True, None
        return [PropertyResult(**r) for r in answer["results"]], stopped, answer["sharing"]

    def finish_alone(self) -> tuple[dict[str, list[PropertyResult]], bool]:
        """Own runs (:func:`run_alone`, :meth:`answer`): each policy's results, whether it was interrupted."""
        answer, stopped = self.answer()
        if answer is None:
            return {}, True
        return {spec: [PropertyResult(**r) for r in rs] for spec, rs in answer["alone"].items()}, stopped


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
