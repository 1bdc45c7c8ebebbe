"""A ``torch.distributed`` process group of ``C`` DCP ranks, started once and reused.

The driver (the pytest process) is not a member of the group: it starts ``C``
worker processes (:mod:`crossattn_sizing.distributed.rank`), each in its own
process group, joined by a file-based rendezvous in a private directory (no
port to race for), and talks to each over a private socket pair. Every request
goes to every rank; the replies are collected with a timeout:

- a rank whose socket reaches end of file died: the failure names it and how
  it ended (exit status or signal);
- a rank that does not answer within the timeout hung: the failure names it,
  and the ranks that were only waiting for it in a collective are named apart;

either way the whole group is killed (a collective cannot recover from a lost
member) and the next request starts a fresh one. :class:`RankFailure` is an
``AssertionError``, so a property reports it as a failed example, with the
rank in the message, and Hypothesis shrinks it like any other failure.

No rank outlives the pool, nor does anything a rank started: each rank runs
under a supervisor, a child subreaper (:mod:`crossattn_sizing.distributed.rank`),
:meth:`RankPool.close` ends each rank's whole tree by id, the
exit handler of :mod:`crossattn_sizing.base.processes` closes every live pool, the pytest plugin
closes them at session finish, and a worker exits by itself when its driver's socket closes.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from crossattn_sizing.base.errors import HarnessError, described
from crossattn_sizing.base.processes import (
    describe_exit,
    end_children,
    end_supervised,
    forget_child,
    register_child,
    remove_temp_folder,
    temp_folder,
)
from crossattn_sizing.base.threads import one_thread_unless_set
from crossattn_sizing.distributed.rank import PeerFailed, recv, send

BACKENDS = ("gloo", "nccl")


class RankFailure(AssertionError):
    """A DCP rank died or hung; the message names the rank."""


CLOSE_GRACE_S = 2.0
"""Seconds the ranks of a closing pool have, together, to leave by themselves (they leave at once
without tearing torch down); then they are killed. Bounded, so a pool closed at exit, or on a
SIGTERM, never holds the process up."""

CHILD_KIND = "dcp ranks"
"""The pools' kind in the process registry, so :func:`close_all` ends them all and only them."""


class RankPool:
    """``dcp_size`` worker processes forming one process group, serving requests in lockstep."""

    def __init__(self, backend: str, dcp_size: int, impl_spec: str, device: str = "cpu",
                 timeout_s: float = 120.0) -> None:
        if backend not in BACKENDS:
            raise HarnessError(f"--dcp-backend {backend!r}: use one of {', '.join(BACKENDS)} or inprocess")
        if dcp_size < 2:
            raise ValueError(f"a distributed DCP group needs at least 2 ranks, got {dcp_size}")
        self.backend = backend
        self.dcp_size = dcp_size
        self.impl_spec = impl_spec
        self.device = device
        self.timeout_s = timeout_s
        self.procs: list[subprocess.Popen[bytes]] = []
        self.conns: list[Connection] = []
        self.dir: Path | None = None
        self.starts = 0  # how many times a group was started (restarts after a failure count)

    # Life cycle --------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """Whether the rank processes are up."""
        return bool(self.procs)

    @property
    def pids(self) -> list[int]:
        """The rank processes' ids, for tests and for the error that names a dead one."""
        return [p.pid for p in self.procs]

    def start(self) -> RankPool:
        """Start the rank processes and wait for each to report it started; no-op when running."""
        if self.running:
            return self
        self._check_devices()
        self.dir = temp_folder("crossattn-dcp-")  # removed at exit too, however the run ends
        init_method = f"file://{self.dir / 'rendezvous'}"
        env = dict(os.environ)
        # The worker imports what the driver can (tests.broken_impls, a user's module:attr).
        env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p] + [env.get("PYTHONPATH", "")])
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # ranks of one machine meet on loopback
        one_thread_unless_set(env)
        register_child(self.close, kind=CHILD_KIND)
        self.starts += 1
        for rank in range(self.dcp_size):
            ours, theirs = socket.socketpair()
            cmd = [sys.executable, "-m", "crossattn_sizing.distributed.rank", "--fd", str(theirs.fileno()),
                   "--rank", str(rank), "--dcp-size", str(self.dcp_size), "--backend", self.backend,
                   "--init-method", init_method, "--impl", self.impl_spec, "--device", self.device,
                   # The collectives' own timeout is far above ours, so the driver sees a hang first
                   # and can name the rank; theirs only stops ranks orphaned by a killed peer.
                   "--collective-timeout", str(2 * self.timeout_s + 60)]
            proc = subprocess.Popen(cmd, pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            theirs.close()
            self.procs.append(proc)
            self.conns.append(Connection(ours.detach()))
        try:
            # Start-up imports torch and the implementation in each rank: allow more than a request.
            for rank, reply in enumerate(self._collect("start", max(self.timeout_s, 300.0))):
                if reply[0] == "error":
                    raise HarnessError(f"DCP rank {rank} ({self.backend}) could not start: "
                                       f"{described(reply[1])}")
        except BaseException:
            self.close()
            raise
        return self

    def _check_devices(self) -> None:
        if self.backend != "nccl":
            return
        import torch

        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if found < self.dcp_size:
            raise HarnessError(f"--dcp-backend nccl with {self.dcp_size} ranks needs {self.dcp_size} "
                               f"CUDA devices (one per rank), found {found}")

    def close(self) -> None:
        """End every rank, with whatever it started, and forget the group; idempotent.

        Each rank is asked to close and given :data:`CLOSE_GRACE_S` in all (one
        deadline for every rank, not one each) to leave by itself, ending what it
        started; then each rank's supervisor is killed with its whole tree
        (:func:`~crossattn_sizing.base.processes.end_supervised`): a rank that hangs, or
        a process of the implementation's that started a session of its own, is
        ended by its id too.
        """
        for conn in self.conns:
            with contextlib.suppress(OSError):
                send(conn, ("close", ()))
            conn.close()
        ends = time.monotonic() + CLOSE_GRACE_S
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, ends - time.monotonic()))
            end_supervised(proc)
        self.procs, self.conns = [], []
        if self.dir is not None:
            remove_temp_folder(self.dir)
            self.dir = None
        forget_child(self.close)

    # Requests ----------------------------------------------------------------------
    def call(self, op: str, *payload: Any) -> list[Any]:
        """Send ``op`` to every rank and return each rank's result, in rank order.

        An exception a rank raised (a capacity refusal, invalid slots) is raised
        here as itself, from the lowest rank that raised one of its own.
        """
        self.start()
        for rank, conn in enumerate(self.conns):
            try:
                send(conn, (op, payload))
            except OSError:
                self._fail(f"DCP rank {rank} ({self.backend}) died before {op!r}: "
                           f"{describe_exit(self._exit_status(rank))}")
        replies = self._collect(op, self.timeout_s)
        errors = [(r, reply) for r, reply in enumerate(replies) if reply[0] == "error"]
        if errors:
            own = [(r, reply) for r, reply in errors if not isinstance(reply[1], PeerFailed)] or errors
            rank, (_, exc, text) = own[0]
            _discard_if_not_run(exc)
            note = f"(raised on DCP rank {rank} of {self.dcp_size}, {self.backend})"
            if not isinstance(exc, AssertionError | HarnessError):  # unexpected: keep the rank's traceback
                note += "\n" + text
            exc.add_note(note)
            raise exc
        return [reply[1] for reply in replies]

    def _collect(self, op: str, timeout_s: float) -> list[Any]:
        """One reply per rank; a rank that dies or stays silent past ``timeout_s`` fails the pool."""
        pending = dict(enumerate(self.conns))
        replies: dict[int, Any] = {}
        in_collective: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while pending:
            ready = wait(list(pending.values()), timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                self._hung(op, sorted(pending), in_collective, timeout_s)
            for conn in ready:
                rank = self.conns.index(conn)  # type: ignore[arg-type]
                try:
                    reply = recv(conn)  # type: ignore[arg-type]
                except (EOFError, OSError):
                    self._fail(f"DCP rank {rank} of {self.dcp_size} ({self.backend}) died during {op!r}: "
                               f"{describe_exit(self._exit_status(rank))}")
                if reply[0] == "collective":
                    in_collective.add(rank)
                    continue
                replies[rank] = reply
                del pending[rank]
        return [replies[r] for r in range(self.dcp_size)]

    def _hung(self, op: str, silent: list[int], in_collective: set[int], timeout_s: float) -> None:
        culprits = [r for r in silent if r not in in_collective] or silent
        waiting = sorted(in_collective & set(silent))
        names = ", ".join(str(r) for r in culprits)
        message = (f"DCP rank{'s' if len(culprits) > 1 else ''} {names} of {self.dcp_size} ({self.backend}) "
                   f"did not answer {op!r} within {timeout_s:g}s (hung)")
        if waiting:
            message += f"; rank{'s' if len(waiting) > 1 else ''} {', '.join(map(str, waiting))} " \
                       "waited for it in the all-gather"
        self._fail(message)

    def _exit_status(self, rank: int) -> int | None:
        try:
            return self.procs[rank].wait(timeout=10)
        except subprocess.TimeoutExpired:
            return None

    def _fail(self, message: str) -> None:
        self.close()
        raise RankFailure(message + "; the process group was torn down and restarts for the next example")


def close_all() -> None:
    """Close every live pool (pytest session finish; at exit each is ended as a registered child)."""
    end_children(CHILD_KIND)


def _discard_if_not_run(exc: BaseException) -> None:
    """A case a rank's engine implementation could not run (bf16 in Triton's interpreter, a kernel the
    interpreter refuses) is discarded here, with its reason, as in one process: no verdict, never a
    failure. The rank cannot discard it itself: it runs outside the Hypothesis example."""
    from crossattn_sizing.engine.client import KernelsCannotRun, not_run

    if isinstance(exc, KernelsCannotRun):
        not_run(exc.reason)
