"""Run ``verify`` under each Hypothesis profile, N times in a row, while burners keep every core busy.

The evidence for issue 35's "every profile passes the suite for the built-in
policies that are expected to hold, with both cores busy, three runs in a row":
for each profile named (default: every one, in the order given), ``verify
--hypothesis-profile P`` runs the whole property suite for every built-in
policy expected to hold, ``--runs`` times back to back. Each run gets an empty
``HOME`` and example database (as the test run does), and after each the
script prints its exit status, wall time, load average, each policy's verdict
with how many properties held, did not run or failed, every process the run
left (found by an environment variable only that run set, :data:`MARK`, so
other programs in the checkout do not count) and every ``crossattn-*`` folder
left in the run's own temp folder (``TMPDIR``, fresh per run; torch's own cache
folder there is named, not counted).
A run passes when no policy fails (exit 0, or 3 where the profile runs no
example for some properties: ``replay`` and ``reuse`` with an empty database
run only the pinned examples, and the rest are "not run", never "holds").

    python benchmarks/loaded_profiles.py --runs 3 --burners 2 replay reuse ci dev gpu nightly

``--stop-after MIN`` starts no new profile once that many minutes have gone,
so a series fits a time box; the profiles left out are named at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loaded_repeat import ROOT, burners

PROFILES = ("dev", "ci", "nightly", "gpu", "replay", "reuse")  # crossattn_sizing.base.settings.PROFILES
PASSING = (0, 3)
"""Exit statuses without a failing policy: 3 is "nothing failed, something did not run"."""


def holding_policies() -> list[str]:
    """The built-in policies the harness expects to hold (read from the package, not repeated here)."""
    code = "from crossattn_sizing.core.policies import BUILTIN_POLICIES as P\n" \
           "print(' '.join(n for n, p in P.items() if p.expected_to_hold))"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.split()  # fmt: skip


MARK = "LOADED_PROFILES_RUN"
"""An environment variable each run's ``verify`` gets, with a value of its own: every process it
starts inherits it, so what a run left is found by it, whatever its working folder or parent, and
other programs in the checkout (tests run beside the series) are not counted."""


def left_by(mark: str) -> list[str]:
    """Live processes whose environment carries ``MARK=mark``."""
    found = []
    needle = f"{MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        found.append(f"{entry.name}: {cmd[:120]}")
    return found


def summary(report: Path) -> str:
    """Each policy's verdict and its properties by outcome, from the JSON report."""
    try:
        data = json.loads(report.read_text())
    except (OSError, ValueError):
        return "no JSON report"
    parts = []
    for policy in data["policies"]:
        counts: dict[str, int] = {}
        for prop in policy["properties"]:
            counts[prop["outcome"]] = counts.get(prop["outcome"], 0) + 1
        said = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
        parts.append(f"{policy['policy']} {policy['verdict']} ({said})")
    return "; ".join(parts)


def one_run(profile: str, policies: list[str], work: Path) -> tuple[int, float, str, str]:
    """One ``verify`` under ``profile``: exit status, seconds, the report's summary, stdout's tail."""
    home = work / "home"
    home.mkdir(parents=True)
    (work / "tmp").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSATTN_")}
    env.update(HOME=str(home), TMPDIR=str(work / "tmp"), XDG_CACHE_HOME=str(home / ".cache"),
               CROSSATTN_DB=str(work / "examples"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TRITON_INTERPRET="1", **{MARK: str(work)})  # fmt: skip
    report = work / "verify.json"
    argv = [sys.executable, "-m", "crossattn_sizing", "verify", "--hypothesis-profile", profile,
            *(a for p in policies for a in ("--policy", p)), "--json", str(report)]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc.returncode, time.monotonic() - start, summary(report), tail


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", nargs="*", default=list(PROFILES), choices=PROFILES)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--burners", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--stop-after", type=float, metavar="MIN", help="start no profile after this")
    args = parser.parse_args()
    # SIGTERM (and SIGINT, which a shell ignores in a background job) end the series through the
    # ``finally`` blocks, so the burners are killed; the run in progress is killed by subprocess.run.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    policies = holding_policies()
    began = time.monotonic()
    done: list[str] = []
    try:
        return series(args, policies, began, done)
    except KeyboardInterrupt:  # the burners and the run in progress are gone (finally, subprocess.run)
        print(f"stopped by a signal; profiles finished: {' '.join(done) or 'none'}; the run in progress "
              "was killed and is not counted", flush=True)  # fmt: skip
        return 130


def series(args: argparse.Namespace, policies: list[str], began: float, done: list[str]) -> int:
    """Every profile's runs with the burners going; ``done`` collects the profiles finished."""
    failures = leftovers = 0
    with burners(args.burners) as procs, tempfile.TemporaryDirectory(prefix="loaded-profiles-") as scratch:
        print(f"{args.burners} burners pids {[p.pid for p in procs]}; {os.cpu_count()} cores; "
              f"policies {' '.join(policies)}", flush=True)  # fmt: skip
        for profile in args.profiles:
            if args.stop_after is not None and time.monotonic() - began > 60 * args.stop_after:
                break
            for i in range(1, args.runs + 1):
                load = os.getloadavg()[0]
                work = Path(scratch) / f"{profile}-{i}"
                code, seconds, said, tail = one_run(profile, policies, work)
                left = left_by(str(work))
                found = sorted(p.name for p in (work / "tmp").iterdir())
                new = [name for name in found if name.startswith("crossattn-")]
                other = [name for name in found if not name.startswith("crossattn-")]
                failures += code not in PASSING
                leftovers += len(left) + len(new)
                print(f"{profile:8s} run {i}: exit {code}, {seconds:6.1f} s, load {load:.1f} -> "
                      f"{os.getloadavg()[0]:.1f}; {said}; processes left: {len(left)}; "
                      f"temp folders left: {len(new)}", flush=True)  # fmt: skip
                for line in [*left, *new]:
                    print(f"    left: {line}")
                if other:  # torch's own caches (torchinductor_USER), shared by every torch program
                    print(f"    also in TMPDIR, not the harness's: {' '.join(other)}")
                if code not in PASSING:
                    print(tail)
            done.append(profile)
    skipped = [p for p in args.profiles if p not in done]
    print(f"{len(done)} profiles x {args.runs} runs: {failures} failed, {leftovers} things left behind; "
          f"burners killed{'; not run (time box): ' + ' '.join(skipped) if skipped else ''}")
    return 1 if failures or leftovers else 0


if __name__ == "__main__":
    sys.exit(main())
