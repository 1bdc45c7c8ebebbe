"""First bad commit: ``git bisect`` driven by a failure's check line, in a temporary clone.

The user's checkout is never touched: its objects are read through a
``git clone --shared --no-checkout`` in a temporary folder, where ``git
bisect`` checks each step out. At each step the check line runs on that tree
(:func:`crossattn_sizing.runs.check_runs.run_check`): the judge's "fails" is
``bad``, "holds" is ``good``, and a tree that cannot run (bad input, not run,
a crash, the deadline) is ``skip``, never good or bad. The temporary folder
goes on every way out (an error, Ctrl-C).

Both ends are run before the bisection: git bisect takes GOOD and BAD on
the user's word, and when GOOD already fails (or BAD holds) it still names a
commit, GOOD's child, which proves nothing. So GOOD must hold and BAD must
fail the check line; otherwise (either fails to run too) no commit is named
and :attr:`BisectResult.why_none` says which end was not what the range
claims. The commit named first bad is then always one the check ran and saw
fail.

The ends are any revision git accepts (``v0.6``, ``release-0.4``,
``origin/fix/rows``, a sha prefix, ``HEAD~2``), resolved by git itself
(``git rev-parse --verify REV^{commit}``), never parsed here beyond the
``..`` between them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossattn_sizing.base.errors import OptionError
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.base.processes import temp_folder_while
from crossattn_sizing.runs.check_runs import CheckRun, run_check

WORD = {Outcome.FAILS: "bad", Outcome.HOLDS: "good"}
"""The check's verdict -> git bisect's word; anything else is ``skip``."""


@dataclass(frozen=True)
class CommitRange:
    """``GOOD..BAD`` as the user typed it and as git resolved it."""

    good_name: str
    bad_name: str
    good: str  # full commit ids
    bad: str
    commits: int  # in GOOD..BAD

    def end(self, which: str) -> str:
        """``GOOD `v0.6` (1a2b3c4d5e6f)``: an end as a line names it."""
        name, commit = (self.good_name, self.good) if which == "GOOD" else (self.bad_name, self.bad)
        return f"{which} `{name}`" + ("" if commit.startswith(name) else f" ({commit[:12]})")


@dataclass
class BisectResult:
    """What the bisection found: the first bad commit (or why none), and every step it ran."""

    span: CommitRange
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
        span = self.span
        return {
            "range": f"{span.good_name}..{span.bad_name}",
            "good": span.good,
            "bad": span.bad,
            "commits": span.commits,
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


def commit_range(top: Path, text: str) -> CommitRange:
    """``GOOD..BAD``, each end resolved by git to a commit, and the count of commits in it; one line
    when it is not a range of the checkout.

    A ref name never holds ``..`` (git refuses it), so the first ``..`` splits the range; ``...`` (git's
    symmetric difference) is not a range to bisect.
    """
    good, sep, bad = text.partition("..")
    if "..." in text or not sep or not good.strip() or not bad.strip():
        raise OptionError("--bisect", text, "must be GOOD..BAD (two revisions of the checkout, two dots)")
    ids = []
    for end in (good, bad):
        proc = _git(top, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{end}^{{commit}}",
                    check=False)  # fmt: skip
        if proc.returncode != 0:
            raise OptionError("--bisect", text, f"{end} is not a commit of {top}")
        ids.append(proc.stdout.strip())
    if _git(top, "merge-base", "--is-ancestor", ids[0], ids[1], check=False).returncode != 0:
        raise OptionError("--bisect", text, f"{good} is not an ancestor of {bad}")
    count = int(_git(top, "rev-list", "--count", f"{ids[0]}..{ids[1]}").stdout.strip())
    if count == 0:
        raise OptionError("--bisect", text, "the range holds no commit")
    return CommitRange(good, bad, ids[0], ids[1], count)


def _ends_wrong(span: CommitRange, words: dict[str, tuple[str, str]]) -> str:
    """Why the range's ends do not bound a first bad commit ("" when GOOD holds and BAD fails)."""
    wrong = []
    for which, commit, wanted in (("GOOD", span.good, "good"), ("BAD", span.bad, "bad")):
        word, line = words[commit]
        if word == wanted:
            continue
        if word == "skip":
            wrong.append(f"{span.end(which)} could not be checked ({line or 'no verdict'})")
        else:
            wrong.append(f"{span.end(which)} already fails the check line" if which == "GOOD"
                         else f"{span.end(which)} holds (the check line does not fail there)")  # fmt: skip
    return "; ".join(wrong)


def bisect(
    top: Path,
    tree: Path,
    span: CommitRange,
    argv_for: Callable[[Path], list[str]],
    on_step: Callable[[str, CheckRun], None] | None = None,
) -> BisectResult:
    """Bisect ``span`` of the checkout ``top``; ``tree`` is the engine tree's path inside it.

    The ends run first: a GOOD that does not hold or a BAD that does not fail names no commit.
    """
    result = BisectResult(span)
    with temp_folder_while("crossattn-bisect-") as tmp:
        clone = tmp / "repo"
        _git(tmp, "clone", "--quiet", "--shared", "--no-checkout", str(top), str(clone))
        step_tree = clone / tree.relative_to(top)
        ran: dict[str, tuple[str, str]] = {}

        def judge(commit: str) -> str:
            run = run_check(argv_for(step_tree))
            # The line names the clone's tree; the user knows it as theirs, at this commit.
            line = run.line.replace(str(step_tree), str(tree)).replace(str(clone), str(top))
            line = line.removeprefix("crossattn-sizing: error: ")
            word = WORD.get(run.verdict, "skip")
            ran[commit] = (word, line)
            result.steps.append((commit, word, line))
            if on_step is not None:
                on_step(commit, CheckRun(run.verdict, run.status, line))
            return word

        for commit in (span.good, span.bad):
            _git(clone, "checkout", "--quiet", "--detach", commit)
            judge(commit)
        result.why_none = _ends_wrong(span, ran)
        if result.why_none:
            return result
        out = _git(clone, "bisect", "start", span.bad, span.good).stdout
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
        # git names a commit it was told is bad: BAD (which ran and failed) or a step that failed.
        result.first_bad = _git(clone, "rev-parse", "refs/bisect/bad").stdout.strip()
        result.subject = _git(top, "log", "-1", "--format=%s", result.first_bad).stdout.strip()
        return result
