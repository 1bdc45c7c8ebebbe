"""A failure's ``check`` line, run on another tree or release: bisect's steps and the release table's rows.

The line runs as its own ``python -m crossattn_sizing check`` process (its
own process group, a deadline, ended with its children on Ctrl-C), so the
engine's code never shares the report's process, and the verdict is the
check's exit status, the judge's word: 1 fails, 0 holds. Anything else
(bad input: the tree cannot be loaded; 3: not run; a crash; the deadline)
is "not run", never holds or fails.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.base.processes import end_group, forget_child, register_child

CHECK_DEADLINE_S = 900.0
"""How long one check may run (a release's worker starts in about 30 s on a loaded 2-core machine)."""


def run_child(
    cmd: Sequence[str],
    kind: str,
    deadline_s: float,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> tuple[str, int | None]:
    """Run ``cmd`` as a child in its own process group (ended with its children at the deadline, on
    Ctrl-C or at exit); what it printed (stdout and stderr together) and its exit status, None past the
    deadline."""
    proc = subprocess.Popen(
        list(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip

    def end() -> None:
        end_group(proc, grace_s=2.0)

    register_child(end, kind)
    try:
        out, _ = proc.communicate(timeout=deadline_s)
        status: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        end()
        out, status = "", None
    finally:
        end()
        forget_child(end)
    return out or "", status


@dataclass(frozen=True)
class CheckRun:
    """One run of a check line: its verdict and the last line it printed (why, when not run)."""

    verdict: Outcome
    status: int | None
    line: str


def run_check(argv: Sequence[str], cwd: Path | None = None, deadline_s: float = CHECK_DEADLINE_S) -> CheckRun:
    """Run ``crossattn-sizing`` with ``argv`` (``check ...``) in a child process; its verdict."""
    cmd = [sys.executable, "-m", "crossattn_sizing", *argv]
    out, status = run_child(cmd, "check", deadline_s, cwd=cwd)
    if status is None:
        out = f"no verdict within {deadline_s:.0f} s"
    lines = [x for x in (out or "").strip().splitlines() if x.strip()]
    last = lines[-1].strip() if lines else ""
    verdict = {0: Outcome.HOLDS, 1: Outcome.FAILS}.get(status if status is not None else -1, Outcome.NOT_RUN)
    return CheckRun(verdict, status, last)
