"""One DCP rank in its own process: its KV-cache shard, its block tables, its share of attention.

Started by :class:`crossattn_sizing.distributed.pool.RankPool` as
``python -m crossattn_sizing.distributed.rank``, it joins a
``torch.distributed`` process group (gloo on CPU, NCCL on CUDA), loads the
implementation under test itself, and serves the driver's requests over a
private socket (inherited file descriptor, one pickled message per request):

- ``open``: a fresh :class:`~crossattn_sizing.impl.runner.PagedRunner` holding only
  this rank (one per Hypothesis example; the process and group are reused);
- ``append``, ``write``, ``row``: the runner's own methods, on this rank;
- ``attend``: this rank's partial ``(out, lse)``; for a DCP-sharded group the
  ranks first agree that every one of them computed its partial (an
  all-reduce of an error flag, so a rank whose guard refused does not leave
  the others waiting in a collective), then all-gather the partials, as the
  engine does, and each merges them with the implementation's ``merge``.

Before entering a collective the worker tells the driver, so a rank that
hangs elsewhere is told apart from the ranks waiting for it. The worker exits
when the driver closes the socket or dies (end of file), so it never outlives
its driver. It runs under a supervisor, as a user-code worker does
(:func:`crossattn_sizing.base.processes.supervise`): the process the driver
started is a child subreaper that runs nothing of the implementation, so
every process a rank starts, one that calls ``setsid()`` included, is found
and ended by its id, when the rank leaves, when it dies, and when the driver
kills it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pickle
import shutil
import sys
import traceback
from collections.abc import Callable
from datetime import timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, NoReturn

import torch

from crossattn_sizing.base.errors import described
from crossattn_sizing.base.processes import under_supervisor
from crossattn_sizing.impl.runner import PagedRunner, Reads


def send(conn: Connection, message: Any) -> None:
    """Send with plain pickle: tensors travel as copies of their data.

    ``Connection.send`` pickles with multiprocessing's reducers, under which
    torch passes a tensor's storage as a shared-memory handle, which needs the
    sender's multiprocessing authkey; these processes do not share one.
    """
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def recv(conn: Connection) -> Any:
    """One message from the driver (what :func:`send` wrote), unpickled."""
    return pickle.loads(conn.recv_bytes())


class PeerFailed(RuntimeError):
    """This rank was fine, but another rank failed before the collective."""


def _error(exc: BaseException) -> tuple[str, Any, str]:
    """An ``error`` reply carrying the exception itself when it pickles, else its description."""
    text = traceback.format_exc()
    try:
        pickle.loads(pickle.dumps(exc))
        return ("error", exc, text)
    except Exception:
        return ("error", RuntimeError(described(exc)), text)


class Rank:
    """The state of one rank and the handlers of the driver's requests."""

    def __init__(self, conn: Connection, rank: int, dcp_size: int, backend: str, impl_spec: str,
                 device: str) -> None:
        import torch.distributed as dist

        from crossattn_sizing.specs.resolve import Isolation, load_impl

        self.conn = conn
        self.rank = rank
        self.dcp_size = dcp_size
        self.dist = dist
        # In process here: this rank is itself the worker the judge talks to, behind the pool's own
        # deadline, so a second worker inside it would only double the transport and hide how it died.
        self.impl = load_impl(impl_spec, device, Isolation(in_process=True))
        self.runner: PagedRunner | None = None
        # gloo exchanges host tensors; NCCL exchanges tensors on this rank's GPU.
        self.comm_device = torch.device("cpu") if backend == "gloo" else torch.device(device)

    def open(self, config: Any, widths: Any, kwargs: dict[str, Any]) -> None:
        """Open a scenario on this rank: its own runner over its shard."""
        if config.dcp_size != self.dcp_size:
            raise ValueError(f"config has dcp_size {config.dcp_size}, this group has {self.dcp_size} ranks")
        self.runner = PagedRunner(config, widths, self.impl, rank=self.rank, **kwargs)

    def held(self) -> PagedRunner:
        """The open scenario's runner; an error when the driver sent no ``open``."""
        if self.runner is None:
            raise RuntimeError("no scenario is open on this rank")
        return self.runner

    def append(self, g: int, row: int, ids: list[int]) -> list[int]:
        """Append blocks to this rank's row."""
        return self.held().append(g, row, ids)

    def write(self, *args: Any) -> None:
        """Write keys and values into this rank's shard."""
        self.held().write(*args)

    def row(self, g: int, row: int) -> list[int]:
        """This rank's copy of a row, for the driver to compare across ranks."""
        return self.held().tables[g].row(row)

    def attend(self, g: int, reads: Reads) -> torch.Tensor:
        """This rank's attention: its partial over its shard, gathered and merged with the others'."""
        runner = self.held()
        if not runner.sharded(g):  # replicated or unsharded: every rank attends over all keys itself
            outs, _ = runner.partials(g, reads)
            return outs[0].to(runner.dtype).cpu()
        failure: BaseException | None = None
        try:
            outs, lses = runner.partials(g, reads)
        except Exception as exc:
            failure = exc
        send(self.conn, ("collective", "all-gather"))
        flag = torch.tensor([0 if failure is None else 1], dtype=torch.int32, device=self.comm_device)
        self.dist.all_reduce(flag, op=self.dist.ReduceOp.MAX)
        if failure is not None:
            raise failure
        if int(flag.item()):
            raise PeerFailed("another DCP rank failed before the all-gather")
        out = outs[0].to(self.comm_device).contiguous()
        lse = lses[0].to(self.comm_device).contiguous()
        all_outs = [torch.empty_like(out) for _ in range(self.dcp_size)]
        all_lses = [torch.empty_like(lse) for _ in range(self.dcp_size)]
        self.dist.all_gather(all_outs, out)
        self.dist.all_gather(all_lses, lse)
        dev = runner.device
        merged = self.impl.merge(outs=[o.to(dev) for o in all_outs], lses=[x.to(dev) for x in all_lses])
        return merged.to(runner.dtype).cpu()

    def serve(self) -> None:
        """Answer the driver's requests until it sends ``close`` or goes away."""
        handlers: dict[str, Callable[..., Any]] = {
            "open": self.open, "append": self.append, "write": self.write, "row": self.row,
            "attend": self.attend,
        }  # fmt: skip
        while True:
            try:
                op, payload = recv(self.conn)
            except (EOFError, OSError):  # the driver closed the socket or died
                self.orphaned = True
                return
            if op == "close":
                return
            try:
                send(self.conn, ("ok", handlers[op](*payload)))
            except Exception as exc:
                send(self.conn, _error(exc))


def _remove_rendezvous(init_method: str) -> None:
    """Remove the driver's temporary rendezvous folder (``crossattn-dcp-*``) once the driver is gone."""
    folder = Path(init_method.removeprefix("file://")).parent
    if folder.name.startswith("crossattn-dcp-"):
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> NoReturn:
    """A DCP rank process under its supervisor: join the process group, serve the driver until it
    closes, end whatever the implementation started, and leave."""
    parser = argparse.ArgumentParser(prog="crossattn_sizing.distributed.rank")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--dcp-size", type=int, required=True)
    parser.add_argument("--backend", choices=("gloo", "nccl"), required=True)
    parser.add_argument("--init-method", required=True)
    parser.add_argument("--impl", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--collective-timeout", type=float, required=True)
    args = parser.parse_args(argv)
    # Before any thread starts (gloo's, OpenMP's): this process stays as the rank's supervisor, a child
    # subreaper, so whatever the implementation starts, in a session of its own too, is ended by its id.
    # The driver does not need its ranks watching it: it closes their connections, and a rank whose
    # driver died finds out there (``orphaned``). Leave at once: the driver waits for its ranks when it
    # closes the pool, and tearing down torch and the process group takes seconds on a loaded machine.
    leave = under_supervisor(lambda: os.close(args.fd), _flush_streams, watch=False)
    try:
        status = _serve(args)
    except BaseException:  # a harness bug: its traceback, then the same exit as any other
        traceback.print_exc()
        status = 1
    leave(status)


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def _serve(args: argparse.Namespace) -> int:
    """Join the process group, load the implementation, then answer the driver until it closes."""
    conn = Connection(args.fd)
    torch.set_num_threads(1)  # C ranks share the machine's cores
    try:
        import torch.distributed as dist

        device = args.device
        if args.backend == "nccl":
            torch.cuda.set_device(args.rank)
            device = f"cuda:{args.rank}"
        dist.init_process_group(args.backend, init_method=args.init_method, rank=args.rank,
                                world_size=args.dcp_size, timeout=timedelta(seconds=args.collective_timeout))
        rank = Rank(conn, args.rank, args.dcp_size, args.backend, args.impl, device)
    except Exception as exc:
        send(conn, _error(exc))
        return 1
    send(conn, ("ready", os.getpid()))
    try:
        rank.serve()
    finally:
        conn.close()
        if getattr(rank, "orphaned", False):  # a driver that died removes nothing: its ranks do
            _remove_rendezvous(args.init_method)
        # No destroy_process_group: a peer may already be gone, and the process ends here anyway.
    return 0


if __name__ == "__main__":
    main()
