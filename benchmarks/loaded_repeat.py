"""Run test files N times back to back while burner processes keep every core busy.

The check that a suite does not depend on how busy the machine is: each run
must pass, and after each run no process started from this checkout may be
left (every process whose working directory is the repository, other than
this script and its burners, is listed and counted). Burners run in their own
process group and are killed on the way out, however the script ends.

    python benchmarks/loaded_repeat.py --runs 10 --burners 2 tests/test_fuzz.py tests/test_interrupt.py
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BURN = "while True: pass"


@contextlib.contextmanager
def burners(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs = [subprocess.Popen([sys.executable, "-c", BURN], start_new_session=True) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def ancestors() -> set[int]:
    """This process and the shells that started it (they may well sit in the checkout)."""
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return pids


def parent_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def descendants(roots: set[int]) -> set[int]:
    """``roots`` and every process below them (another run in the checkout this script must not judge)."""
    parents = {int(e.name): parent_of(int(e.name)) for e in Path("/proc").iterdir() if e.name.isdigit()}
    found = set(roots)
    grew = True
    while grew:
        new = {pid for pid, ppid in parents.items() if ppid in found and pid not in found}
        found |= new
        grew = bool(new)
    return found


def left_behind(exclude: set[int]) -> list[str]:
    """Processes running in this checkout that are not this script or a burner."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if cwd == str(ROOT) or cwd.startswith(f"{ROOT}/"):
            found.append(f"{entry.name}: {cmd[:120]}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--burners", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--ignore-tree", type=int, action="append", default=[], metavar="PID",
                        help="another run in this checkout (with its children): not judged")  # fmt: skip
    args = parser.parse_args()
    env = {**os.environ, "CROSSATTN_PROFILE": "ci", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TRITON_INTERPRET": "1"}  # fmt: skip
    failures = leftovers = 0
    with burners(args.burners) as procs:
        exclude = {*ancestors(), *(p.pid for p in procs)}
        pids = [p.pid for p in procs]
        print(f"{args.burners} burners ({BURN!r}) pids {pids}; {os.cpu_count()} cores", flush=True)
        for i in range(1, args.runs + 1):
            start = time.monotonic()
            proc = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args.files],
                cwd=ROOT, env=env, capture_output=True, text=True,
            )  # fmt: skip
            summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
            left = left_behind(exclude | descendants(set(args.ignore_tree)))
            failures += proc.returncode != 0
            leftovers += len(left)
            print(f"run {i:2d}: exit {proc.returncode}, {time.monotonic() - start:6.1f} s, {summary}; "
                  f"processes left: {len(left)}", flush=True)  # fmt: skip
            for line in left:
                print(f"    left: {line}")
            if proc.returncode != 0:
                print(proc.stdout[-4000:])
    print(f"{args.runs} runs: {failures} failed, {leftovers} processes left behind; burners killed")
    return 1 if failures or leftovers else 0


if __name__ == "__main__":
    sys.exit(main())
