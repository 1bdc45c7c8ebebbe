"""The harness's side of the worker protocol: start a release's worker once, reuse it, survive its crash.

A worker (:mod:`crossattn_sizing.engine.worker`) is started on first use of a
release and kept for the process: Hypothesis examples reuse it, so the
release's import (seconds to tens of seconds) is paid once. A worker that dies
in the middle of a request (a real kernel reading past its allocation can
segfault) turns into :class:`EngineCrash` for that request, naming the signal;
the next request starts a fresh worker. Workers read their requests from a
pipe and exit at its end, and :func:`close_all` (registered in
:mod:`crossattn_sizing.base.processes`, run at exit) ends them, so none outlives the harness.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hypothesis.errors import UnsatisfiedAssumption

from crossattn_sizing.base import settings
from crossattn_sizing.base.errors import JudgedFailure, NotExpressible
from crossattn_sizing.base.processes import descendants, end_supervised, register_child
from crossattn_sizing.base.threads import one_thread_unless_set, usable_cores
from crossattn_sizing.engine.install import (
    MAX_DEPENDENCY_ROUNDS,
    Release,
    ReleaseUnavailable,
    add_dependency,
    record_shims,
    resolve_release,
)


def top_level(module: object) -> str | None:
    """The top-level package of a missing module's dotted name (what gets installed), if one was named."""
    return module.split(".")[0] if isinstance(module, str) and module else None


class Inexpressible(ReleaseUnavailable, NotExpressible):
    """The release cannot represent the config asked about (e.g. a DCP-replicated group before 0.34)."""


class Discarded(Inexpressible, UnsatisfiedAssumption):
    """A config or case the release cannot be asked about, met inside a Hypothesis example.

    Hypothesis discards the example (it is what ``reject()`` raises); every
    layer between passes it on as the harness's own error (a
    :class:`~crossattn_sizing.base.errors.NotExpressible`), so the core's policy
    and implementation checks let it through without knowing Hypothesis.
    """

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.reason = why
        self.location = None


class KernelsCannotRun(Inexpressible):
    """A case the release's kernels cannot run on this machine (``reason`` says why): no verdict.

    Raised where no Hypothesis example is running (``check``, ``reproduce``, a
    DCP rank's process, whose driver discards the example with the reason).
    """

    def __init__(self, spec: str, reason: str) -> None:
        super().__init__(f"{spec}: {reason}")
        self.spec, self.reason = spec, reason

    def __reduce__(self) -> tuple[Any, ...]:  # crosses the DCP ranks' pipes with its fields
        return (KernelsCannotRun, (self.spec, self.reason))


def _discard(event_text: str, why: str) -> None:
    """Inside a Hypothesis example: count ``event_text`` as an event and raise :class:`Discarded`."""
    from hypothesis import event
    from hypothesis.control import currently_in_test_context

    if currently_in_test_context():
        event(event_text)
        raise Discarded(why)


def discard_inexpressible(why: str) -> None:
    """Inside a Hypothesis example: discard it (the release cannot be asked about it), counted as an event.

    Outside one (``check``, ``reproduce``) the caller re-raises the error: a
    config the release cannot represent has no verdict.
    """
    _discard(f"not expressible in the engine, example discarded: {why.split(':', 1)[-1].strip()[:80]}", why)


def not_run(why: str) -> None:
    """Inside a Hypothesis example: discard it as not run (counted as an event, with the reason)."""
    _discard(why[:100], why)


class EngineCrash(JudgedFailure):
    """The engine's process died while running a request (the example's failure, not the run's).

    An ``AssertionError`` (:class:`~crossattn_sizing.base.errors.JudgedFailure`) so a property reports it
    as the case that failed.
    """


class CallTimeout(EngineCrash):
    """A request outlived the worker's deadline: the worker was killed; the next request starts a new one.

    ``headline``: the deadline and, for a release, the step its code was in (what a failure's first line
    says); the message adds the release and the request.
    """

    def __init__(self, message: str, headline: str = "") -> None:
        super().__init__(message)
        self.headline = headline or message


IMPORT_DEADLINE = 120.0
"""Seconds a worker with a deadline may take to import the code under test (torch alone takes seconds on a
loaded machine), when its call deadline is shorter."""

STACK_WAIT_S = 30.0
"""Seconds a timed-out release worker is given to start writing where its code was (faulthandler's dump,
written from the signal handler as soon as the process runs; a loaded machine may take seconds) before it
is killed; past it the verdict says no more than the op. Generous: a dump that is written ends the wait."""


def _signal_name(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


MAX_PARALLEL = 4
"""Default ceiling on processes per release for one long batch (each holds about 0.5 GB)."""


def parallel_workers() -> int:
    """How many processes of one release a long batch (``prove``) is spread over.

    :data:`~crossattn_sizing.base.settings.ENGINE_WORKERS` when set, else the CPUs this process may
    use, at most :data:`MAX_PARALLEL`. A value that is not a positive integer is refused.
    """
    count = settings.engine_workers()
    if count is None:
        return min(MAX_PARALLEL, usable_cores())
    return count


SUPERVISOR_GRACE_S = 10.0
"""Seconds a user-code worker's supervisor may take, once its worker died, to end what it started and
leave with the worker's exit status (it is killed after, and the status then reads SIGKILL)."""


kill_worker = end_supervised
"""Kill a worker that runs user code with everything it started, by id and by group (its supervisor is
a child subreaper: :func:`crossattn_sizing.base.processes.supervise`)."""


def _echo_lines(source: Any, kept: collections.deque[str]) -> None:
    """Copy a worker's stderr line by line to this process's stderr and to ``kept`` (for a crash's tail)."""
    with contextlib.suppress(OSError, ValueError):  # the pipe closed under us at exit
        for line in source:
            kept.append(line)
            with contextlib.suppress(OSError, ValueError, AttributeError):  # a closed or full stderr here
                # The process's own stderr, not a test runner's capture of sys.stderr: what the
                # user's code wrote to its fd 2 reaches the same place as when it ran in process.
                out = sys.__stderr__ or sys.stderr
                out.write(line)
                out.flush()


# What a worker remembers of the running test ---------------------------------------------------------


class NotRunAfterBreak(NotExpressible, UnsatisfiedAssumption):
    """An example not run because the code under test already crashed or timed out in this test.

    An ``UnsatisfiedAssumption``, so Hypothesis counts the example rejected and stops shrinking at once;
    a :class:`~crossattn_sizing.base.errors.NotExpressible`, so every layer between (the user-code
    boundary, an engine's own refusals) passes it on as the harness's own error, never as a verdict.
    """


def current_test() -> str | None:
    """The pytest test whose Hypothesis example is running (its node id), or None outside one."""
    from hypothesis.control import currently_in_test_context

    if not currently_in_test_context():
        return None
    return os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0] or None


def current_example() -> int:
    """Which Hypothesis example is running (the identity of its data), inside a test."""
    from hypothesis.control import current_build_context

    return id(current_build_context().data)


def final_replay() -> bool:
    """Whether the running example is Hypothesis's last replay of the failure it reports (it must run)."""
    from hypothesis.control import current_build_context

    return bool(getattr(current_build_context(), "is_final", False))


def skip_after_break(label: str) -> None:
    """Reject the running example: the code under test already crashed, timed out or answered unusably in
    this test.

    Why: Hypothesis shrinks a failure by running many more examples, and each
    would call a worker that dies or hangs (a whole deadline each) again: minutes,
    and a fresh worker per step. A crash or a hang says little about which
    example is smallest, so after it the test's further examples are not run
    (Hypothesis counts them invalid, so shrinking stops at once) and the failure
    reported is the example that did break, replayed at the end.
    """
    from hypothesis import event

    event(f"not run: {label} already crashed or answered unusably in this test")
    raise NotRunAfterBreak(f"{label} already crashed or answered unusably in this test")


def request_digest(op: str, payload: dict[str, Any]) -> str:
    """One request's identity (its op and every field), for remembering the request that timed out."""
    text = json.dumps({"op": op, **payload}, sort_keys=True, default=repr)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


_LIVE: weakref.WeakSet[EngineWorker] = weakref.WeakSet()
"""Every worker object of this process, for :func:`forget_breaks`."""


def forget_breaks() -> None:
    """A new test starts (the plugin calls this at each test's setup): no worker has broken in it yet.

    Why per test run, not per test name: ``verify``'s shared run turns each
    example over several policies and reruns a property for a policy alone;
    each such run must see the code under test fail for itself.
    """
    for worker in list(_LIVE):
        worker.broken_in.clear()
        worker.timed_out.clear()


_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+) in (?P<function>.+)$')


def innermost_frame(dump: str, roots: list[str]) -> str:
    """``function (path:line)`` of the innermost frame in ``dump`` (faulthandler's stacks, most recent
    call first) whose file lies under one of ``roots`` (the path relative to it); "" when none does."""
    bases = []
    for root in roots:
        with contextlib.suppress(OSError, RuntimeError):
            bases.append(Path(root).resolve())
    for line in dump.splitlines():
        found = _FRAME.match(line)
        if found is None:
            continue
        with contextlib.suppress(OSError, RuntimeError):
            file = Path(found["file"]).resolve()
            for base in bases:
                if file.is_relative_to(base):
                    return f"{found['function']} ({file.relative_to(base)}:{found['line']})"
    return ""


class EngineWorker:
    """One running worker process for one release on one device.

    ``deadline`` (seconds, None: none) bounds each request: past it the
    worker is killed with everything it started (it runs under a supervisor,
    :func:`~crossattn_sizing.engine.protocol.supervised`) and the request
    raises :class:`CallTimeout`. Every worker the commands start has one
    (:func:`worker_for`, :func:`kept_worker`, :mod:`crossattn_sizing.engine.isolated`):
    ``--call-timeout`` or ``CROSSATTN_CALL_TIMEOUT``, default 60 s (a release's
    kernels interpreted on a CPU may need more on a large case: raise it).

    ``echo_stderr``: whether what the worker writes to stderr is passed on to
    this process's stderr as it comes (a user's own prints, which they expect
    to see) or only kept for the error line of a crash (a release's import
    warnings, which are noise).
    """

    echo_stderr = False

    def __init__(self, release: Release, device: str = "cpu", *, records: bool = True,
                 deadline: float | None = None) -> None:  # fmt: skip
        self.release = release
        self.device = device
        self.records = records  # writes what the release needed to its manifest (siblings leave that alone)
        self.deadline = deadline
        self.start_deadline: float | None = None  # for the import (the ready line); None: no limit
        self.proc: subprocess.Popen[str] | None = None
        self.ready: dict[str, Any] = {}
        self._stderr: Any = None
        self._echo: threading.Thread | None = None
        self._echoed: collections.deque[str] = collections.deque(maxlen=64)
        self._lock = threading.Lock()
        self.stopped_in = ""  # where the release's code was when the last deadline passed (hung_where)
        # test -> the example in which the code under test crashed or timed out (broke()): that example's
        # every turn (verify's shared run asks it once per policy) still runs, later examples do not
        self.broken_in: dict[str, int] = {}
        # test and request -> the timeout it met: its final replay fails at once, not a deadline later
        self.timed_out: dict[tuple[str, str], CallTimeout] = {}
        _LIVE.add(self)

    @property
    def label(self) -> str:
        """What the worker runs, for its error lines."""
        return self.release.label

    def command(self) -> list[str]:
        """The worker's command line: the loop, the device, and what it imports."""
        cmd = [sys.executable, "-m", "crossattn_sizing.engine.worker", "--device", self.device]
        for path in self.release.paths:
            cmd += ["--path", path]
        return cmd

    def sibling(self) -> EngineWorker:
        """Another process of the same release and device, for batches run in parallel; closed at exit."""
        twin = EngineWorker(self.release, self.device, records=False, deadline=self.deadline)
        twin.start_deadline = self.start_deadline
        _SIBLINGS.append(twin)
        return twin

    # Lifecycle -------------------------------------------------------------
    def _spawn(self) -> dict[str, Any]:
        env = self.environment()
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (lives as long as the worker)
        # A worker with a deadline leads its own process group, so a kill on expiry takes anything
        # it started too.
        self.proc = subprocess.Popen(
            self.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            stderr=subprocess.PIPE if self.echo_stderr else self._stderr,
            env=env, start_new_session=self.deadline is not None,
        )  # fmt: skip
        if self.echo_stderr:
            self._echoed.clear()
            pump = (self.proc.stderr, self._echoed)
            self._echo = threading.Thread(target=_echo_lines, args=pump, daemon=True)
            self._echo.start()
        line = self._read_line(self.proc, self.start_deadline)
        if not line.endswith("\n"):
            if self.deadline is not None:  # a hung import: killed with what it started
                with contextlib.suppress(subprocess.TimeoutExpired):  # one that died: its own status
                    self.proc.wait(timeout=SUPERVISOR_GRACE_S)
                kill_worker(self.proc)
            self.proc.wait()
            raise ReleaseUnavailable(
                f"{self.label}: the worker died while importing "
                f"({_signal_name(self.proc.returncode)}): {self.stderr_tail()}"
            )
        return json.loads(line)

    def environment(self) -> dict[str, str]:
        """The worker's environment: this process's, with the CPU settings a CPU worker needs."""
        env = dict(os.environ)
        if self.device == "cpu":
            env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
            one_thread_unless_set(env)  # several workers run at once under verify and prove
        return env

    def _read_line(self, proc: subprocess.Popen[str], deadline: float | None) -> str:
        """One protocol line, or "" when the worker died, or was killed when ``deadline`` passed."""
        if proc.stdout is None:
            return ""
        if deadline is None:
            return proc.stdout.readline()
        self.stopped_in = ""
        timer = threading.Timer(deadline, self._expire, (proc,))
        timer.daemon = True
        timer.start()
        try:
            return proc.stdout.readline()
        except BaseException:  # Ctrl-C while it ran: its answer would be read as the next one's
            kill_worker(proc)
            raise
        finally:
            timer.cancel()

    def _expire(self, proc: subprocess.Popen[str]) -> None:
        """The deadline passed: note where the release's code was (:meth:`hung_where`), then kill the worker
        with everything it started."""
        self.stopped_in = self.hung_where(proc)
        kill_worker(proc)

    def start(self) -> dict[str, Any]:
        """Start the worker, installing modules the import chain misses (one per round)."""
        if self.proc is not None and self.proc.poll() is None:
            return self.ready
        for _ in range(MAX_DEPENDENCY_ROUNDS):
            ready = self._spawn()
            if ready.get("ready"):
                self.ready = ready
                if self.records:
                    record_shims(self.release, ready)
                return ready
            self.close()
            error = str(ready.get("said") or ready.get("error"))  # a user line: no class of the harness
            module = top_level(ready.get("missing_module"))
            if module == "vllm":
                raise ReleaseUnavailable(f"{self.release.label} lacks a module the adapter imports: {error}")
            if ready.get("kind") == "SizingExecError":
                raise ReleaseUnavailable(f"{self.release.label}: its sizing cannot be executed: {error}")
            if module is None:
                raise ReleaseUnavailable(f"{self.release.label} does not import on this machine: {error}")
            add_dependency(self.release, module)
        raise ReleaseUnavailable(
            f"{self.release.label}: still missing modules after {MAX_DEPENDENCY_ROUNDS} installs"
        )

    def start_once(self, refuse: Callable[[dict[str, Any]], Exception]) -> dict[str, Any]:
        """Start the worker with nothing installed for it; a ready line saying it did not load is
        closed and raised as ``refuse(ready)`` (a user's module, a tree the adapter cannot read)."""
        if self.proc is not None and self.proc.poll() is None:
            return self.ready
        ready = self._spawn()
        if not ready.get("ready"):
            self.close()
            raise refuse(ready)
        self.ready = ready
        return ready

    def stderr_tail(self, lines: int = 3) -> str:
        """The last lines the worker wrote to stderr: usually why it died."""
        if self._echo is not None:
            self._echo.join(timeout=1.0)  # the last lines of a worker that died are its cause
            written = list(self._echoed)
        elif self._stderr is not None:
            self._stderr.seek(0)
            written = self._stderr.read().splitlines()
        else:
            return ""
        text = [ln.rstrip("\n") for ln in written if ln.strip() and "warn" not in ln.lower()]
        return " | ".join(text[-lines:])

    def close(self) -> None:
        """End the worker's process (user code's at once, with its group); safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.stdin:
            with contextlib.suppress(OSError):  # a worker already gone
                proc.stdin.close()
        if self.deadline is not None:  # user code: a thread it left must not hold the judge up
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=2)
            kill_worker(proc)
        else:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout:
            proc.stdout.close()
        if self._echo is not None:  # the pipe ends with the process group; its reader then stops
            self._echo.join(timeout=1.0)
            if not self._echo.is_alive() and proc.stderr:
                proc.stderr.close()

    # Requests --------------------------------------------------------------
    def request(self, op: str, **payload: Any) -> dict[str, Any]:
        """Send one request; the worker's answer, :class:`EngineCrash` if it died, ReleaseUnavailable if
        refused.

        A module the release imports lazily (first needed by this request) is
        installed like the ones its import needs, and the request retried.
        """
        for _ in range(MAX_DEPENDENCY_ROUNDS):
            try:
                return self._request(op, payload)
            except ReleaseUnavailable as exc:
                module = top_level(getattr(exc, "missing_module", None))
                if module is None or module == "vllm":
                    raise
                add_dependency(self.release, module)
                self.close()
        raise ReleaseUnavailable(
            f"{self.release.label}: {op} still misses modules after {MAX_DEPENDENCY_ROUNDS} installs"
        )

    def _request(self, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.start()
            proc = self.proc
            assert proc is not None and proc.stdin is not None and proc.stdout is not None
            started = time.monotonic()
            try:
                proc.stdin.write(json.dumps({"op": op, **payload}) + "\n")
                proc.stdin.flush()
                line = self._read_line(proc, self.deadline)
            except BrokenPipeError:
                line = ""
            if not line.endswith("\n"):  # no answer, or half of one: the worker is gone
                timed_out = self.deadline is not None and time.monotonic() - started >= self.deadline
                if self.deadline is not None:  # whatever the worker started goes with it
                    if not timed_out:  # its supervisor ends the tree, then leaves with the worker's status
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            proc.wait(timeout=SUPERVISOR_GRACE_S)
                    kill_worker(proc)
                proc.wait()
                how = _signal_name(proc.returncode)
                tail = self.stderr_tail()
                self.proc = None  # the next request starts a fresh worker
                if timed_out:
                    where = self.stopped_in
                    raise CallTimeout(self.timeout_message(op, where), self.timeout_headline(where))
                raise EngineCrash(
                    f"{self.label} worker died ({how}) while running {op}" + (f": {tail}" if tail else "")
                )
            reply = json.loads(line)
        if not reply.get("ok"):
            raise self.refusal(op, reply)
        return reply["result"]

    def timeout_message(self, op: str, where: str = "") -> str:
        """What a request that outlived the deadline reads as: the deadline, the release, the request, and
        where in the release's own files its code was when it was stopped (``where``; "" unknown)."""
        said = f"timed out after {self.deadline:g} s: {self.label}: the release's code did not answer ({op})"
        return f"{said}, stopped in {where}" if where else said

    def timeout_headline(self, where: str = "") -> str:
        """A timeout's first line: the release's code did not answer within the deadline, and the step."""
        said = f"the release's code did not answer within {self.deadline:g} s"
        return f"{said}, stopped in {where}" if where else said

    def hung_where(self, proc: subprocess.Popen[str]) -> str:
        """Where the release's code was as its deadline passed: ``function (path:line)``, "" when unknown.

        The worker registered faulthandler for ``SIGUSR1``
        (:func:`~crossattn_sizing.engine.protocol.stack_on_request`), which
        writes every thread's stack to its stderr from the signal handler itself,
        so a loop or a wait on a lock says where it is; the innermost frame in
        the release's own files names the step that hung.
        """
        if self.echo_stderr or self._stderr is None or not self.release.paths:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self._stderr.seek(0, os.SEEK_END)
            start = self._stderr.tell()
            # The worker under the supervisor (``proc``, which runs none of the release's code and is not
            # asked), and what it started: a fork of it dumps its stack too.
            for pid in descendants(proc.pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGUSR1)
            ends, written, quiet = time.monotonic() + STACK_WAIT_S, "", 0
            while time.monotonic() < ends and quiet < 20:  # a dump, then a second with nothing new: whole
                time.sleep(0.05)
                self._stderr.seek(start)
                dump = self._stderr.read()
                where = innermost_frame(dump, self.release.paths[:1])
                if where:
                    return where
                quiet = quiet + 1 if "most recent call first" in dump and dump == written else 0
                written = dump
        return ""

    def ask(self, op: str, **payload: Any) -> dict[str, Any]:
        """:meth:`request`, from inside a property's example, remembering what broke in the running test.

        After the code under test crashed or timed out in a test, that test's
        later examples are not run (:func:`skip_after_break`); its final replay
        is, and the very request that timed out fails again at once, with the
        same timeout, rather than a whole deadline later. Outside a test, as
        :meth:`request`.
        """
        test = current_test()
        if test is None:
            return self.request(op, **payload)
        example = current_example()
        if self.broken_in.get(test, example) != example and not final_replay():
            skip_after_break(self.label)
        # The request's digest is taken only once a timeout is on record in this test (a kernel's payload
        # is megabytes): the replay of the request that timed out fails at once, with that timeout.
        seen = self.timed_out.get((test, request_digest(op, payload))) if test in self.broken_in else None
        if seen is not None:
            raise CallTimeout(str(seen), seen.headline)
        try:
            return self.request(op, **payload)
        except EngineCrash as exc:
            if isinstance(exc, CallTimeout):
                self.timed_out[test, request_digest(op, payload)] = exc
            self.crashed()
            self.broke()
            raise

    def crashed(self) -> None:
        """What a crash or timeout of a request changes in how the next ones run: nothing here (a fresh
        worker starts); a user's code's worker forks each call from then on."""

    def broke(self) -> None:
        """The code under test crashed, timed out or answered in no usable form in the current test: the
        rest of that test's examples are not run (see :func:`skip_after_break`), its final replay is."""
        test = current_test()
        if test is not None:
            self.broken_in.setdefault(test, current_example())

    def refusal(self, op: str, reply: dict[str, Any]) -> ReleaseUnavailable:
        """The error a ``{"ok": false}`` answer stands for (:class:`Inexpressible` when it says so)."""
        error = Inexpressible if reply.get("kind") == "Unrepresentable" else ReleaseUnavailable
        refused = error(f"{self.label}: {op} failed: {reply.get('said') or reply.get('error')}")
        refused.missing_module = reply.get("missing_module")  # type: ignore[attr-defined]
        return refused


_WORKERS: dict[tuple[str, ...], EngineWorker] = {}
_SIBLINGS: list[EngineWorker] = []


def worker_for(
    spec: str, device: str = "cpu", wheel_cache: Path | None = None, offline: bool | None = None,
    deadline: float | None = None,
) -> EngineWorker:
    """The (shared, started) worker of the release ``spec`` names; ``wheel_cache`` is where its wheel
    is looked for (``audit --cache-dir``; the engine cache then lies inside it), else the default.

    Shared per cache as well as per spec: the same spec read from another cache (another ``HOME``
    or ``CROSSATTN_ENGINE_CACHE`` in one process) is another release, checked anew.

    Every request into it runs under ``deadline`` seconds (a command's ``--call-timeout``; None: the
    setting, :func:`~crossattn_sizing.base.settings.call_timeout`, for a worker started now, the one it
    has for a kept worker), as every engine's and a user's code's: past it the worker and everything it
    started are ended and the request raises :class:`CallTimeout`.
    """
    key = (spec, device, str(settings.engine_cache(wheel_cache)), repr(offline))
    worker = _WORKERS.get(key)
    if worker is None:
        limit = settings.call_timeout() if deadline is None else deadline
        release = resolve_release(spec, offline=offline, wheel_cache=wheel_cache)
        worker = EngineWorker(release, device, deadline=limit)
        worker.start_deadline = max(limit, IMPORT_DEADLINE)
        worker.start()
        _WORKERS[key] = worker
    elif deadline is not None:
        worker.deadline = deadline
        worker.start_deadline = max(deadline, IMPORT_DEADLINE)
    return worker


W = TypeVar("W", bound=EngineWorker)


def kept_worker(
    workers: dict[str, W], spec: str, deadline: float | None, make: Callable[[str, float], W]
) -> W:
    """The started worker ``workers`` keeps for the tree ``spec`` names (stripped), made by
    ``make(spec, deadline)`` and started on first use, then ended at exit with every worker.

    How an engine family keeps one worker per tree (SGLang's, TensorRT-LLM's): ``make`` resolves the
    spec and builds the family's worker, refusing bad input in one line before any process starts.
    ``deadline``: seconds each call may take (a command's ``--call-timeout``); None: the setting
    (:func:`~crossattn_sizing.base.settings.call_timeout`) for a worker started now, the one it has for
    a kept worker. A deadline given for a kept worker replaces its own, so the caller's option bounds its
    calls whichever command started the worker.
    """
    spec = spec.strip()
    worker = workers.get(spec)
    if worker is None:
        worker = make(spec, settings.call_timeout() if deadline is None else deadline)
        worker.start()
        _SIBLINGS.append(worker)  # ended by close_all at exit
        workers[spec] = worker
    elif deadline is not None:
        worker.deadline = deadline
    return worker


def close_all() -> None:
    """End every worker this process started."""
    while _WORKERS:
        _, worker = _WORKERS.popitem()
        worker.close()
    while _SIBLINGS:
        _SIBLINGS.pop().close()


register_child(close_all)  # the workers above, ended at exit with every other child
