"""First bad commit: ``git bisect`` driven by a failure's check line, in a temporary clone.

The user's checkout is never touched: its objects are read through a
``git clone --shared --no-checkout`` in a temporary folder, where ``git
bisect`` checks each step out. At each step the check line runs on that tree
(:func:`crossattn_sizing.runs.check_runs.run_check`): the judge's "fails" is
``bad``, "holds" is ``good``, and a tree that cannot run (bad input, not run,
a crash, the deadline) is ``skip``, never good or bad. The temporary folder
goes on every way out (an error, Ctrl-C).

The range's GOOD end is the user's word (git bisect never runs it); the
commit named first bad is always one the check ran and saw fail: when git
names one no step ran (the range's BAD end), it is run once more.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossattn_sizing.base.errors import OptionError
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.runs.check_runs import CheckRun, run_check

WORD = {Outcome.FAILS: "bad", Outcome.HOLDS: "good"}
"""The check's verdict -> git bisect's word; anything else is ``skip``."""


@dataclass
class BisectResult:
    """What the bisection found: the first bad commit (or why none), and every step it ran."""

    good: str
    bad: str
    commits: int  # in GOOD..BAD
    first_bad: str | None = None
    subject: str = ""
    why_none: str = ""
    steps: list[tuple[str, str, str]] = field(
        default_factory=list
    )  # (commit, good|bad|skip, check's last line)

    @property
    def runs(self) -> int:
        """How many times the check line ran."""
        return len(self.steps)

    def to_json(self) -> dict[str, Any]:
        """The section as the report's JSON holds it."""
        return {
            "range": f"{self.good}..{self.bad}",
            "commits": self.commits,
            "first_bad_commit": self.first_bad,
            "subject": self.subject,
            "why_none": self.why_none,
            "runs": self.runs,
            "steps": [{"commit": c, "word": w, "check": line} for c, w, line in self.steps],
        }


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise OptionError(
            "git " + " ".join(args[:2]), str(cwd), (proc.stderr.strip() or "failed").splitlines()[0]
        )
    return proc


def checkout_of(path: Path) -> Path:
    """The top of the git checkout holding ``path``; one line when there is none."""
    proc = _git(path, "rev-parse", "--show-toplevel", check=False) if path.is_dir() else None
    if proc is None or proc.returncode != 0:
        raise OptionError("--engine", str(path), "is not a git checkout (--bisect needs NAME@PATH in one)")
    return Path(proc.stdout.strip()).resolve()


def commit_range(top: Path, text: str) -> tuple[str, str, int]:
    """``GOOD..BAD`` as two full commit ids and the count of commits in it; one line if not in the repo."""
    good, sep, bad = text.partition("..")
    if not sep or not good or not bad or "." in bad.lstrip("."):
        raise OptionError("--bisect", text, "must be GOOD..BAD (two commits of the checkout)")
    ids = []
    for end in (good, bad):
        proc = _git(top, "rev-parse", "--verify", "--quiet", f"{end}^{{commit}}", check=False)
        if proc.returncode != 0:
            raise OptionError("--bisect", text, f"{end} is not a commit of {top}")
        ids.append(proc.stdout.strip())
    if _git(top, "merge-base", "--is-ancestor", ids[0], ids[1], check=False).returncode != 0:
        raise OptionError("--bisect", text, f"{good} is not an ancestor of {bad}")
    count = int(_git(top, "rev-list", "--count", f"{ids[0]}..{ids[1]}").stdout.strip())
    if count == 0:
        raise OptionError("--bisect", text, "the range holds no commit")
    return ids[0], ids[1], count


def bisect(
    top: Path,
    tree: Path,
    good: str,
    bad: str,
    count: int,
    argv_for: Callable[[Path], list[str]],
    on_step: Callable[[str, CheckRun], None] | None = None,
) -> BisectResult:
    """Bisect ``good..bad`` of the checkout ``top``; ``tree`` is the engine tree's path inside it."""
    result = BisectResult(good, bad, count)
    tmp = Path(tempfile.mkdtemp(prefix="crossattn-bisect-"))
    try:
        clone = tmp / "repo"
        _git(tmp, "clone", "--quiet", "--shared", "--no-checkout", str(top), str(clone))
        step_tree = clone / tree.relative_to(top)
        ran: dict[str, Outcome] = {}

        def judge(commit: str) -> str:
            run = run_check(argv_for(step_tree))
            ran[commit] = run.verdict
            word = WORD.get(run.verdict, "skip")
            result.steps.append((commit, word, run.line))
            if on_step is not None:
                on_step(commit, run)
            return word

        out = _git(clone, "bisect", "start", bad, good).stdout
        while "is the first bad commit" not in out:
            if "only 'skip'ped commits left" in out:
                result.why_none = "only skipped commits are left: " + " ".join(
                    line.split()[0]
                    for line in out.splitlines()
                    if len(line.split()) and len(line.split()[0]) == 40
                )
                return result
            commit = _git(clone, "rev-parse", "HEAD").stdout.strip()
            out = _git(clone, "bisect", judge(commit), check=False).stdout
        first = _git(clone, "rev-parse", "refs/bisect/bad").stdout.strip()
        if first not in ran:  # never run (the range's BAD end): run it, so the name rests on a verdict
            _git(clone, "checkout", "--quiet", "--detach", first)
            if judge(first) != "bad":
                result.why_none = f"{first[:12]}, the range's BAD end, does not fail the check"
                return result
        result.first_bad = first
        result.subject = _git(top, "log", "-1", "--format=%s", first).stdout.strip()
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
