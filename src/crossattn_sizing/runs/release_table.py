"""The engine's release table: which releases have the defect, each row from that release's own code.

Two sources, as the engine's facts say (:mod:`crossattn_sizing.engine.report_facts`):

- ``audit`` (vLLM): the sizing audit's row of the runner (ModelRunner V2) for
  each release, as ``audit --json`` writes it: executed in a worker, or read
  by the audit's interpreter from the release's source where it cannot run
  (each row says which). From a file the user gives (``--release-table``), or
  by running ``audit`` on each release;
- ``check`` (SGLang): the failure's own check line, run on each release.

The first and last bad release are read off the rows that judged; a row that
could not run is listed as "not run", and never counts either way. No row is
ever filled in from a version comparison.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossattn_sizing.base.errors import OptionError
from crossattn_sizing.base.jsoninput import read_json_option
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.base.processes import temp_folder_while
from crossattn_sizing.releases.versions import release_key
from crossattn_sizing.runs.check_runs import run_check

AUDIT_RUNNER = "v2"
"""The runner whose sizing the vLLM reports are about (ModelRunner V2)."""


@dataclass(frozen=True)
class ReleaseRow:
    """One release's verdict and how it was reached."""

    release: str
    verdict: Outcome
    how: str  # executed | read | check line | why not run


@dataclass
class ReleaseTable:
    """The rows, oldest first, and what they say."""

    source: str
    rows: list[ReleaseRow] = field(default_factory=list)

    def _bad(self) -> list[str]:
        return [r.release for r in self.rows if r.verdict == Outcome.FAILS]

    @property
    def first_bad(self) -> str | None:
        """The oldest release whose own code fails."""
        bad = self._bad()
        return bad[0] if bad else None

    @property
    def last_bad(self) -> str | None:
        """The newest release whose own code fails."""
        bad = self._bad()
        return bad[-1] if bad else None

    @property
    def first_good_after(self) -> str | None:
        """The oldest release after the last bad one whose own code holds (the fix's release)."""
        last = self.last_bad
        seen = last is None
        for r in self.rows:
            if seen and r.verdict == Outcome.HOLDS:
                return r.release
            seen = seen or r.release == last
        return None

    def headline(self) -> str:
        """What the table says, in one sentence or two: the first and last release with the defect, or
        that none fails among those that ran, or that none ran at all (never "none fails" then)."""
        first, last, fixed = self.first_bad, self.last_bad, self.first_good_after
        unrun = [r.release for r in self.rows if r.verdict == Outcome.NOT_RUN]
        if len(unrun) == len(self.rows):
            return "No release was judged: " + (
                f"none of the table's releases ran here ({', '.join(unrun)})."
                if unrun
                else "the table is empty."
            )
        if first is None:
            head = "No release in the table fails" + (" among those that ran." if unrun else ".")
            earlier = unrun
        else:
            head = f"First release with the defect: **{first}**; last: **{last}**" + (
                f"; first release without it after that: {fixed}." if fixed else "."
            )
            names = [r.release for r in self.rows]
            earlier = [name for name in unrun if names.index(name) < names.index(first)]
        if earlier:
            head += f" {'Earlier releases' if first else 'Releases'} not judged (they did not run here): "
            head += f"{', '.join(earlier)}."
        return head

    def to_json(self) -> dict[str, Any]:
        """The table as the report's JSON holds it."""
        return {
            "source": self.source,
            "first_bad": self.first_bad,
            "last_bad": self.last_bad,
            "first_good_after": self.first_good_after,
            "rows": [{"release": r.release, "verdict": r.verdict.value, "how": r.how} for r in self.rows],
        }


def audit_rows(data: Any, where: str) -> list[ReleaseRow]:
    """The V2 rows of an ``audit --json`` report, oldest first; a file of another shape is one line."""
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise OptionError("--release-table", where, "must be the JSON `crossattn-sizing audit --json` writes")
    rows = []
    for r in data["results"]:
        if not isinstance(r, dict) or r.get("runner") != AUDIT_RUNNER or "source" not in r:
            continue
        verdict = {"fails": Outcome.FAILS, "holds": Outcome.HOLDS}.get(str(r.get("verdict")), Outcome.NOT_RUN)
        how = str(r.get("path", "")) if verdict != Outcome.NOT_RUN else f"not run: {r.get('reason') or ''}"
        rows.append(ReleaseRow(str(r["source"]), verdict, how))
    return sorted(rows, key=lambda row: release_key(row.release) or ())  # a name that is no number first


def from_audit_file(path: Path) -> ReleaseTable:
    """The table from a recorded ``audit --json`` file."""
    data = read_json_option("--release-table", str(path))
    return ReleaseTable(f"the sizing audit's ModelRunner V2 rows in {path.name}", audit_rows(data, str(path)))


def by_audit(releases: Sequence[str]) -> ReleaseTable:
    """Run ``audit --engine vllm==X --runner v2`` on each release; its row."""
    rows: list[ReleaseRow] = []
    with temp_folder_while("crossattn-report-audit-") as tmp:
        for version in releases:
            out = tmp / f"{version}.json"
            run = run_check(
                ["audit", "--engine", f"vllm=={version}", "--runner", AUDIT_RUNNER, "--json", str(out)]
            )
            if out.is_file():
                rows += audit_rows(json.loads(out.read_text()), str(out))
            else:
                rows.append(ReleaseRow(version, Outcome.NOT_RUN, f"not run: {run.line}"))
    return ReleaseTable("the sizing audit's ModelRunner V2 row of each release, run now", rows)


def by_check(releases: Sequence[str], argv_for: Any) -> ReleaseTable:
    """Run the failure's check line on each release (``argv_for(version)`` gives its argv)."""
    rows = []
    for version in releases:
        run = run_check(argv_for(version))
        how = "check line" if run.verdict != Outcome.NOT_RUN else f"not run: {run.line}"
        rows.append(ReleaseRow(version, run.verdict, how))
    return ReleaseTable("the failure's check line, run on each release", rows)
