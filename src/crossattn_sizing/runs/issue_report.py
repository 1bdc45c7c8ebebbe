"""One failing property as an issue an engine's maintainers can act on: Markdown and the same as JSON.

Engine-neutral: the content comes from a verify run's record of the failure
(:class:`~crossattn_sizing.findings.results.PropertyResult`: diagnosis,
shrunk example, check line), the engine's report facts
(:mod:`crossattn_sizing.engine.report_facts`: title, step, GPU consequence,
the minimal case in its users' words, the code site) and what ``report``
ran beside it (the release table, a checked fix, a bisection). The Markdown
and the JSON are rendered from one :class:`IssueReport`, so they never
disagree. Nothing here runs engine code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.engine.report_facts import CodeSite, StepFacts
from crossattn_sizing.findings.results import PropertyResult
from crossattn_sizing.runs.bisect import BisectResult
from crossattn_sizing.runs.release_table import ReleaseTable

INSTALL = "python3 -m pip install torch==2.13.0 'crossattn-sizing[all]'"
"""What the replay needs: this package (the CPU build of torch first)."""


@dataclass
class FixCheck:
    """The verdicts with the user's patch applied beside those without it."""

    patch: str
    replays: dict[str, Outcome]  # property -> its failure's check line on the patched copy
    before: dict[str, Outcome]
    after: dict[str, Outcome]
    not_checked: str = ""  # why the patched copy could not run (every verdict after is then not run)

    @property
    def changed(self) -> list[str]:
        """Properties whose verdict the patch changed."""
        return [n for n in self.before if self.after.get(n, Outcome.NOT_RUN) != self.before[n]]

    def to_json(self) -> dict[str, Any]:
        """The section as JSON."""
        return {
            "patch": self.patch,
            "not_checked": self.not_checked,
            "replays": {n: o.value for n, o in self.replays.items()},
            "properties": [
                {
                    "property": n,
                    "before": self.before[n].value,
                    "after": self.after.get(n, Outcome.NOT_RUN).value,
                }
                for n in self.before
            ],
        }


@dataclass
class IssueReport:
    """Everything one issue says, for one failing property of one engine spec."""

    tracker: str
    spec: str
    result: PropertyResult
    facts: StepFacts
    minimal_case: list[str]
    deployed_case: list[str]  # the case as deployed, when its check line was run here and fails too
    deployed_line: str
    site: CodeSite | None
    releases: ReleaseTable | None
    releases_note: str
    fix: FixCheck | None = None
    bisect: BisectResult | None = None
    bisect_note: str = ""
    provenance: list[str] = field(default_factory=list)

    @property
    def slug(self) -> str:
        """The file name stem: engine spec's name and the property."""
        engine = re.split(r"[=@]", self.spec.strip())[0]
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{engine}-{self.result.name.replace('::', '-')}")

    def replay(self) -> list[str]:
        """The commands that replay the failure with this package only."""
        lines = [f"# {INSTALL}"]
        if self.deployed_line:
            lines.append(self.deployed_line)
        if self.result.reproduce:
            lines.append(self.result.reproduce)
        lines += [x.strip() for x in self.result.replay_lines() if not x.strip().startswith("reproduce:")]
        return lines

    def to_json(self) -> dict[str, Any]:
        """The report as JSON: the same content as the Markdown, for bots."""
        site = self.site
        return {
            "title": self.title,
            "engine": self.spec,
            "tracker": self.tracker,
            "property": self.result.name,
            "step": self.facts.step,
            "gpu": self.facts.gpu,
            "affected_releases": self.releases.to_json() if self.releases else None,
            "affected_releases_note": self.releases_note,
            "minimal_case": self.minimal_case,
            "deployed_case": self.deployed_case,
            "code": None
            if site is None
            else {
                "file": site.file,
                "line": site.line,
                "how": site.how,
                "quoted": [{"line": n, "text": t} for n, t in site.quoted],
            },
            "observed": self.result.diagnosis,
            "shrunk_example": self.result.falsifying_example,
            "replay": self.replay(),
            "checked_fix": self.fix.to_json() if self.fix else None,
            "first_bad_commit": self.bisect.to_json() if self.bisect else None,
            "first_bad_commit_note": self.bisect_note,
            "provenance": self.provenance,
        }

    @property
    def title(self) -> str:
        """Engine, step and consequence."""
        return f"[{self.tracker}] {self.facts.title}"

    def markdown(self) -> str:
        """The issue, fit to paste into the engine's tracker."""
        lines = [
            f"# {self.title}",
            "",
            f"Found on `{self.spec}` by crossattn-sizing's property "
            f"`{self.result.name}` (the engine's own code, run on a CPU).",
            "",
        ]
        lines += ["## Affected releases", "", *self._releases(), ""]
        lines += ["## Minimal case", ""]
        if self.deployed_case:
            lines += [f"As deployed (its check line, run here on `{self.spec}`, fails too):", "",
                      *self.deployed_case, "", "The smallest case the harness found:", ""]  # fmt: skip
        lines += [*self.minimal_case, ""]
        lines += ["## Where in the code", "", *self._site(), ""]
        lines += ["## What happens on a GPU", "", self.facts.gpu[0].upper() + self.facts.gpu[1:] + ".", ""]
        lines += [
            "## What was observed",
            "",
            f"Step: {self.facts.step}.",
            "",
            "```",
            self.result.diagnosis.removeprefix("AssertionError: "),
            "```",
            "",
        ]
        lines += [
            "## Reproduce",
            "",
            "Needs only this package; exit status 1 is the failure, 0 would be a pass:",
            "",
            "```sh",
            *self.replay(),
            "```",
            "",
        ]
        if self.fix is not None:
            lines += ["## Checked fix", "", *self._fix(), ""]
        if self.bisect is not None or self.bisect_note:
            lines += ["## First bad commit", "", *self._bisect(), ""]
        lines += ["## Provenance", "", *[f"- {p}" for p in self.provenance]]
        return "\n".join(lines) + "\n"

    def _releases(self) -> list[str]:
        table = self.releases
        if table is None:
            return [self.releases_note]
        head = table.headline()
        rows = ["| release | verdict | how |", "| --- | --- | --- |"]
        rows += [f"| {r.release} | {r.verdict.value} | {r.how} |" for r in table.rows]
        return [head, "", f"Each row comes from that release's own code: {table.source}.", "", *rows]

    def _site(self) -> list[str]:
        site = self.site
        if site is None:
            return ["Not located in the release's files (the diagnosis below says what was observed)."]
        quoted = [f"{n:>5}{'>' if n == site.line else ' '} {text}" for n, text in site.quoted]
        return [f"`{site.file}:{site.line}` in `{self.spec}` ({site.how}):", "", "```python", *quoted, "```"]

    def _fix(self) -> list[str]:
        fix = self.fix
        assert fix is not None
        if fix.not_checked:
            head = (
                f"`{fix.patch}` applies to a copy of `{self.spec}`, but the fix was not checked: the patched "
                f"copy does not load ({fix.not_checked}); every verdict with it is not run."
            )
        else:
            now = fix.replays.get(self.result.name, Outcome.NOT_RUN).value
            mine = fix.after.get(self.result.name, Outcome.NOT_RUN).value
            others = [f"`{n}`" for n in fix.changed if n != self.result.name]
            head = (
                f"`{fix.patch}` applied to a copy of `{self.spec}`: this failure's case (its check line) "
                f"{now}, `{self.result.name}` {mine}; other verdicts "
                + ("changed: " + ", ".join(others) + "." if others else "unchanged.")
            )
        lines = [head, "", "| property | without the patch | with it |", "| --- | --- | --- |"]
        lines += [
            f"| `{n}` | {b.value} | {fix.after.get(n, Outcome.NOT_RUN).value} |"
            for n, b in fix.before.items()
        ]
        return lines

    def _bisect(self) -> list[str]:
        b = self.bisect
        if b is None:
            return [self.bisect_note]
        n = b.span.commits
        span = f"the {n} commit{'s' if n != 1 else ''} of `{b.span.good_name}..{b.span.bad_name}`"
        if b.first_bad is None:
            head = f"No first bad commit named among {span}: {b.why_none}."
        else:
            head = f"**{b.first_bad[:12]}** {b.subject} (git bisect over {span}, {b.runs} runs)."
        # The first two rows are the range's ends, run before git bisect: GOOD must hold, BAD fail.
        rows = ["| commit | bisect | check |", "| --- | --- | --- |"]
        rows += [f"| {c[:12]} | {w} | {line.replace('|', '/')} |" for c, w, line in b.steps]
        return [head, "", *rows]
