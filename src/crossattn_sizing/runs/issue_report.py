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
from crossattn_sizing.engine.report_facts import CodeSite, Excerpt, Served, StepFacts
from crossattn_sizing.engine.tracker_forms import TrackerForm
from crossattn_sizing.findings.results import PropertyResult
from crossattn_sizing.runs.bisect import BisectResult
from crossattn_sizing.runs.release_table import ReleaseTable
from crossattn_sizing.runs.standalone import StandaloneRun

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


DEFAULT_HEADINGS = (
    ("describe", "The bug"),
    ("repro", "Reproduction"),
    ("expected", "Expected and actual"),
    ("code", "Where in the code"),
    ("fix", "Suggested fix"),
    ("releases", "Affected releases"),
)
"""The sections' order and headings for an engine without a tracker form."""


def _ran(run: StandaloneRun | None, how: str) -> list[str]:
    """A standalone run as the report shows it: its command, how it ran, its exit status and its output."""
    if run is None:
        return []
    status = "no exit within its deadline" if run.status is None else f"exit status {run.status}"
    return [f"`{run.command}`, {how} ({status}):", "", "```", run.output.rstrip("\n"), "```", ""]


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
    form: TrackerForm | None = None  # the tracker's bug form; None: the harness's own layout headings
    release: str = ""  # the engine's release as its env tool prints it ("" when not known)
    summary: str = ""  # the plain first paragraph (no harness words)
    fixed_upstream: str = ""  # "Fixed in X by PR #N", said first
    expected: str = ""
    sites: list[tuple[Excerpt, str, tuple[int, ...]]] = field(default_factory=list)
    environment: list[tuple[str, str]] = field(default_factory=list)  # (the env tool's label, value)
    script: str = ""  # repro.py's text
    standalone: StandaloneRun | None = None  # repro.py run in the clean interpreter
    fixed_script: str = ""  # the same script rendered from the patched copy (--fix)
    standalone_fixed: StandaloneRun | None = None
    served: Served | None = None
    patch_text: str = ""  # the --fix diff, as given
    refuses: dict[str, str] = field(default_factory=dict)  # release -> how it refuses such a batch

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

    @property
    def repro_name(self) -> str:
        """The standalone script's file name, beside the report."""
        return f"{self.slug}-repro.py"

    @property
    def repro_fixed_name(self) -> str:
        """The script rendered from the patched copy (``--fix``), beside the report."""
        return f"{self.slug}-repro-fixed.py"

    def to_json(self) -> dict[str, Any]:
        """The report as JSON: the same content as the Markdown, for bots."""
        site = self.site
        return {
            "title": self.title,
            "engine": self.spec,
            "tracker": self.tracker,
            "property": self.result.name,
            "fixed_upstream": self.fixed_upstream,
            "summary": self.summary,
            "step": self.facts.step,
            "gpu": self.facts.gpu,
            "environment": dict(self.environment),
            "expected": self.expected,
            "affected_releases": self.releases.to_json() if self.releases else None,
            "affected_releases_note": self.releases_note,
            "refuses": self.refuses,
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
            "code_sites": [
                {"where": block.where, "what": what, "causing": list(causing), "lines": list(block.lines)}
                for block, what, causing in self.sites
            ],
            "standalone": None
            if self.standalone is None
            else {"file": self.repro_name, **self.standalone.to_json()},
            "standalone_fixed": None
            if self.standalone_fixed is None
            else {"file": self.repro_fixed_name, **self.standalone_fixed.to_json()},
            "served": None
            if self.served is None
            else {
                "gpu": self.served.gpu,
                "launch": self.served.launch,
                "client": self.served.client,
                "note": self.served.note,
                "run": "not run here",
            },
            "observed": self.result.diagnosis,
            "shrunk_example": self.result.falsifying_example,
            "replay": self.replay(),
            "suggested_fix": self.patch_text,
            "checked_fix": self.fix.to_json() if self.fix else None,
            "first_bad_commit": self.bisect.to_json() if self.bisect else None,
            "first_bad_commit_note": self.bisect_note,
            "provenance": self.provenance,
        }

    @property
    def title(self) -> str:
        """The tracker's title form: its prefix, then step and consequence."""
        if self.form is not None:
            return f"{self.form.title_prefix}{self.facts.title}"
        return f"[{self.tracker}] {self.facts.title}"

    def markdown(self) -> str:
        """The issue in the tracker's own form, fit to paste: a plain first paragraph (a fix upstream said
        first), the form's sections in its order, then how the harness found it."""
        lines = [f"# {self.title}", ""]
        if self.fixed_upstream:
            lines += [f"**{self.fixed_upstream}**", ""]
        lines += [self.summary or self._found(), ""]
        if self.form is not None and self.form.checklist:
            lines += [*[f"- [ ] {c}" for c in self.form.checklist], ""]
        for key, heading in self.form.headings if self.form is not None else DEFAULT_HEADINGS:
            body = self._section(key)
            if body:
                lines += [f"## {heading}", "", *body, ""]
        lines += ["## How this was found", "", self._found(), ""]
        lines += [
            f"What the harness observed (step: {self.facts.step}):",
            "",
            "```",
            self.result.diagnosis.removeprefix("AssertionError: "),
            "```",
            "",
        ]
        if self.fix is not None:
            lines += ["### Checked fix", "", *self._fix(), ""]
        if self.bisect is not None or self.bisect_note:
            lines += ["### First bad commit", "", *self._bisect(), ""]
        lines += ["### Provenance", "", *[f"- {p}" for p in self.provenance]]
        return "\n".join(lines) + "\n"

    def _found(self) -> str:
        return (
            f"Found on `{self.spec}` by crossattn-sizing's property `{self.result.name}` "
            "(the engine's own code, run on a CPU)."
        )

    def _section(self, key: str) -> list[str]:
        return {
            "describe": self._describe,
            "repro": self._repro,
            "env": self._environment,
            "expected": self._expected,
            "code": self._site,
            "fix": self._suggested_fix,
            "releases": self._releases,
        }[key]()

    def _describe(self) -> list[str]:
        lines = [self.facts.gpu[0].upper() + self.facts.gpu[1:] + ".", ""]
        if self.deployed_case:
            lines += ["As deployed:", "", *self.deployed_case, "", "The smallest such case:", ""]
        return [*lines, *self.minimal_case]

    def _repro(self) -> list[str]:
        lines: list[str] = []
        if self.script:
            lines += [f"### Without the engine: `{self.repro_name}` (torch and numpy only, CPU)", ""]
            lines += [
                "The engine's own lines, verbatim with their file:line, on the batch as plain data:",
                "",
            ]
            lines += [f"<details><summary>{self.repro_name}</summary>", "", "```python"]
            lines += [self.script.rstrip("\n"), "```", "", "</details>", ""]
            lines += _ran(self.standalone, "run in a clean interpreter where only torch and numpy import")
        served = self.served
        if served is not None:
            lines += ["### On a server (not run here)", "", f"Needs {served.gpu}.", ""]
            if served.note:
                lines += [served.note, ""]
            lines += ["```sh", served.launch, "```", ""]
            lines += ["Then, from a second shell, send the requests at once:", ""]
            lines += ["```python", served.client.rstrip("\n"), "```", ""]
        lines += ["### With crossattn-sizing", "", "Exit status 1 is the failure, 0 would be a pass:", "",
                  "```sh", *self.replay(), "```"]  # fmt: skip
        return lines

    def _environment(self) -> list[str]:
        if not self.environment or self.form is None:
            return []
        return [f"The fields of `{self.form.env_tool}` this run knows (a CPU machine: the GPU fields are "
                "for the reporter to fill in from the server):", "", "```",
                *[f"{label}: {value}" for label, value in self.environment], "```"]  # fmt: skip

    def _expected(self) -> list[str]:
        actual = self.standalone.raised if self.standalone is not None else ""
        lines = [f"**Expected:** {self.expected}", ""] if self.expected else []
        said = f"on a GPU, {self.facts.gpu}"
        if actual:
            said = f"`{self.repro_name}` ends with `{actual}` on a CPU; {said}"
        return [*lines, f"**Actual:** {said}."]

    def _suggested_fix(self) -> list[str]:
        if not self.patch_text:
            return []
        lines = ["```diff", self.patch_text.rstrip("\n"), "```", ""]
        if self.fixed_script:
            run = self.standalone_fixed
            clean = "run clean:" if run is not None and run.status == 0 else "do NOT run clean:"
            lines += [f"With the patch, the same lines ({self.repro_fixed_name}, rendered from the patched "
                      f"copy) {clean}", ""]  # fmt: skip
            lines += _ran(self.standalone_fixed, "in the same clean interpreter")
        return lines[:-1] if lines[-1] == "" else lines

    def _releases(self) -> list[str]:
        table = self.releases
        if table is None:
            return [self.releases_note]
        head = table.headline()
        rows = ["| release | verdict | how |", "| --- | --- | --- |"]
        for r in table.rows:
            refuses = self.refuses.get(r.release, "")
            rows.append(f"| {r.release} | {r.verdict.value} | {r.how}{'; ' + refuses if refuses else ''} |")
        return [head, "", f"Each row comes from that release's own code: {table.source}.", "", *rows]

    def _site(self) -> list[str]:
        site = self.site
        lines: list[str] = []
        for block, what, causing in self.sites:
            quoted = [f"{block.first + i:>5}{'>' if block.first + i in causing else ' '} {text}"
                      for i, text in enumerate(block.lines)]  # fmt: skip
            lines += [f"`{block.where}`: {what}", "", "```python", *quoted, "```", ""]
        if lines:
            lines.insert(0, "Lines marked `>` cause it.")
            lines.insert(1, "")
            if site is not None:
                lines.append(f"Located on `{self.spec}` at `{site.file}:{site.line}`: {site.how}.")
            return lines[:-1] if lines[-1] == "" else lines
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
