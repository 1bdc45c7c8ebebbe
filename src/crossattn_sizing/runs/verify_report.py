"""The verify report: a verdict table for people, JSON and JUnit XML for machines.

All three are rendered from the same :class:`PolicyVerdict` records, so the
terminal, the JSON file and the CI system can never disagree.

Nothing reads "holds" unless it ran and held. Verdicts: ``holds``, ``fails``,
``error``, ``interrupted`` (Ctrl-C stopped the policy's suite) and ``not run``
(deselected, zero examples, or never reached). Exit statuses, in order of
precedence: 130 interrupted, 1 a policy expected to hold fails, 3 nothing
failed but something did not run, 0 every policy ran and the expected ones hold.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from crossattn_sizing.base import standard_output
from crossattn_sizing.base.outcome import (
    EXIT_FAILS,
    EXIT_HOLDS,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    Outcome,
    exit_status,
)
from crossattn_sizing.core.served import LATENT
from crossattn_sizing.findings.results import Finding, PropertyResult
from crossattn_sizing.runs.shared_run import LEFT_SHARED_RUN, POLICY_FREE, SAME_ANSWERS

# Diagnoses hold shell commands: never wrap, colour or interpret them.
PLAIN: dict[str, Any] = {"markup": False, "highlight": False, "soft_wrap": True}


@dataclass
class PolicyVerdict:
    """Every property's result for one policy, and whether that was the expected outcome."""

    policy: str
    expected_to_hold: bool
    properties: list[PropertyResult]
    error: str = ""
    interrupted: bool = False
    known_failures: tuple[str, ...] = ()
    """Properties an engine release is known to fail (its finding): failing one is the harness working;
    the rest are expected to hold. Empty for a policy, whose expectation is :attr:`expected_to_hold`."""

    def expects_failure(self, name: str) -> bool:
        """Whether property ``name`` (a node id or its last part) is expected to fail here."""
        return not self.expected_to_hold or name.split("::")[-1] in self.known_failures

    @property
    def holds(self) -> bool:
        """Every property ran and held (or does not apply, or is violated only latently: on a case no
        served request reaches), and at least one held."""
        outcomes = {p.outcome for p in self.properties}
        settled = {Outcome.HOLDS, Outcome.NOT_APPLICABLE, Outcome.LATENT}
        ran = Outcome.HOLDS in outcomes and outcomes <= settled
        return ran and not self.error and not self.interrupted

    @property
    def outcome(self) -> Outcome:
        """The policy's one word: an error or a failure first, then Ctrl-C, then whether it held."""
        if self.error:
            return Outcome.ERROR
        if any(p.outcome == Outcome.FAILS for p in self.properties):
            return Outcome.FAILS
        if self.interrupted:
            return Outcome.INTERRUPTED
        return Outcome.HOLDS if self.holds else Outcome.NOT_RUN

    @property
    def unexpected(self) -> bool:
        """A policy expected to hold that errors, or fails a property not known to fail, fails the run."""
        if not self.expected_to_hold or self.outcome not in (Outcome.FAILS, Outcome.ERROR):
            return False
        failing = [p.name for p in self.properties if p.outcome == Outcome.FAILS]
        return self.outcome == Outcome.ERROR or not all(self.expects_failure(n) for n in failing)

    @property
    def counted(self) -> Outcome:
        """What the verdict counts as in the run's exit status: fails when unexpected, not run when it
        did not run, else holds (a policy expected to fail that fails was caught)."""
        if self.unexpected:
            return Outcome.FAILS
        return Outcome.NOT_RUN if self.outcome == Outcome.NOT_RUN else Outcome.HOLDS


def violated(outcome: Outcome) -> str:
    """How a violated property is headed: ``fails``, or ``latent`` with what that means."""
    return f"{Outcome.LATENT} ({LATENT})" if outcome == Outcome.LATENT else str(outcome)


def expected(verdict: PolicyVerdict) -> str:
    """What the harness expects of the policy: holds, or fails (a policy known to be wrong; an engine
    release known to fail some properties, named)."""
    if verdict.expected_to_hold and verdict.known_failures:
        return f"{Outcome.FAILS} ({', '.join(verdict.known_failures)}; the rest hold)"
    return Outcome.HOLDS if verdict.expected_to_hold else Outcome.FAILS


EXIT_OUTCOMES = {
    EXIT_INTERRUPTED: Outcome.INTERRUPTED,
    EXIT_FAILS: Outcome.FAILS,
    EXIT_INCOMPLETE: Outcome.NOT_RUN,
    EXIT_HOLDS: Outcome.HOLDS,
}
"""Each exit status of a run and the word that says it (verify's and fuzz's)."""


@dataclass
class VerifyReport:
    """Everything ``verify`` found: the run's settings, a verdict per policy and the findings."""
    profile: str
    impl: str
    device: str
    seed: int | None
    verdicts: list[PolicyVerdict]
    findings: list[Finding] = field(default_factory=list)
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)  # how the run was done (e.g. shared across policies)
    output_error: str | None = None  # standard output could not be written: the process exits 2
    database: str | None = None
    """The folder the profile saves examples in (``CROSSATTN_DB``, else ``examples/`` in Hypothesis's
    storage folder), or None."""

    @property
    def exit_status(self) -> int:
        """The process's status: :attr:`verdict_status`, unless the printed report was lost."""
        if self.output_error is not None and not self.interrupted:
            return standard_output.EXIT_STATUS
        return self.verdict_status

    @property
    def verdict_status(self) -> int:
        """What the verdicts alone say (0, 1, 3; 130 when interrupted)."""
        return exit_status([v.counted for v in self.verdicts], self.interrupted)

    @property
    def outcome(self) -> Outcome:
        """The run's one word: what the exit status says."""
        return EXIT_OUTCOMES[self.verdict_status]

    def property_names(self) -> list[str]:
        """Every property once, in the order the verdicts first list them."""
        names: list[str] = []
        for v in self.verdicts:
            for p in v.properties:
                if p.name not in names:
                    names.append(p.name)
        return names

    def to_json(self) -> dict[str, Any]:
        """The report as ``verify --json`` writes it."""
        return {
            "profile": self.profile,
            "database": self.database,
            "impl": self.impl,
            "device": self.device,
            "seed": self.seed,
            "exit_status": self.exit_status,
            "verdict": self.outcome,
            "interrupted": self.interrupted,
            "output_error": self.output_error,
            "policies": [
                {
                    "policy": v.policy,
                    "expected_to_hold": v.expected_to_hold,
                    "known_failures": list(v.known_failures),
                    "verdict": v.outcome,
                    "unexpected": v.unexpected,
                    "error": v.error,
                    "properties": [asdict(p) for p in v.properties],
                }
                for v in self.verdicts
            ],
            "findings": [asdict(f) for f in self.findings],
            "notes": list(self.notes),
        }

    def markdown(self, maps: dict[str, str]) -> str:
        """The report as Markdown: the verdict table, what was shared, failures, findings and, per
        policy, its capacity map (``maps``: policy name -> image path relative to the file, or why none)."""
        names = self.property_names()
        lines = [
            f"# crossattn-sizing verify (impl={self.impl}, device={self.device}, profile={self.profile})",
            "",
            "| property | " + " | ".join(v.policy for v in self.verdicts) + " |",
            "| --- |" + " --- |" * len(self.verdicts),
        ]
        for n in names:
            cells = []
            for v in self.verdicts:
                by_name = {p.name: p for p in v.properties}
                cells.append(by_name[n].outcome if n in by_name else "-")
            lines.append(f"| `{n}`{self.sharing_mark(n)} | " + " | ".join(cells) + " |")
        lines.append("| **expected** | " + " | ".join(expected(v) for v in self.verdicts) + " |")
        shown = [f"**{v.outcome}{' (UNEXPECTED)' if v.unexpected else ''}**" for v in self.verdicts]
        lines.append("| **verdict** | " + " | ".join(shown) + " |")
        lines += ["", f"Exit status {self.exit_status} ({self.outcome}).", ""]
        marks = {self.sharing_mark(n) for n in names}
        if " (once)" in marks:
            lines.append(f"- (once): {POLICY_FREE}")
        if " (shared)" in marks:
            lines.append(f"- (shared): {SAME_ANSWERS}; {LEFT_SHARED_RUN}")
        lines += [f"- {note}" for note in self.notes]
        for v in self.verdicts:
            for p in v.properties:
                if p.outcome in (Outcome.FAILS, Outcome.LATENT):
                    note = [f"  note: {p.reason}"] if p.reason else []
                    body = "\n".join([p.diagnosis.removeprefix("AssertionError: "), *p.replay_lines(), *note])
                    lines += ["", f"## {v.policy} / {p.name} {violated(p.outcome)}", "", "```", body, "```"]
        for f in self.findings:
            lines += ["", f"## Finding: {f.title}", "", "```", f.detail, "```"]
        lines += ["", "## Capacity maps", ""]
        for v in self.verdicts:
            image = maps.get(v.policy, "not drawn")
            if image.startswith("not drawn"):
                lines.append(f"- {v.policy}: {image}")
            else:
                lines += [f"### {v.policy}", "", f"![capacity map of {v.policy}]({image})", ""]
        return "\n".join(lines) + "\n"

    def junit(self) -> str:
        """The report as JUnit XML: one test suite per policy, one test case per property; a policy
        expected to fail that fails is a pass (the harness caught it), and the case says so."""
        suites = ET.Element("testsuites", name="crossattn-sizing verify")
        for v in self.verdicts:
            failures = sum(1 for p in v.properties
                           if (p.outcome == Outcome.FAILS) != v.expects_failure(p.name))  # fmt: skip
            suite = ET.SubElement(
                suites, "testsuite", name=v.policy, tests=str(len(v.properties)), failures=str(failures)
            )
            if v.error:
                case = ET.SubElement(suite, "testcase", classname=v.policy, name="load")
                ET.SubElement(case, "error", message=v.error)
            for p in v.properties:
                case = ET.SubElement(
                    suite, "testcase", classname=v.policy, name=p.name, time=f"{p.duration_s:.3f}"
                )
                if p.outcome == Outcome.NOT_APPLICABLE:
                    ET.SubElement(case, "skipped", message=p.reason or "not applicable")
                elif p.outcome == Outcome.NOT_RUN:
                    # Not a pass: a JUnit consumer must not count it green.
                    why = "interrupted before it ran" if v.interrupted else (p.reason or "no example ran")
                    ET.SubElement(case, "error", message=f"not run: {why}")
                elif p.outcome == Outcome.LATENT:  # judged, not a failure: said beside the pass
                    said = [LATENT, p.diagnosis, *p.replay_lines()]
                    ET.SubElement(case, "system-out").text = "\n".join(said)
                elif not v.expects_failure(p.name) and p.outcome == Outcome.FAILS:
                    failure = ET.SubElement(case, "failure", message=p.diagnosis.splitlines()[0][:200])
                    failure.text = "\n".join([p.diagnosis, "", *p.replay_lines()])
                elif v.expects_failure(p.name) and p.outcome == Outcome.HOLDS:
                    message = f"{p.name} did not catch {v.policy}, a policy known to be wrong"
                    ET.SubElement(case, "failure", message=message)
            if not v.properties:
                case = ET.SubElement(suite, "testcase", classname=v.policy, name="suite")
                ET.SubElement(case, "error", message=f"not run: {v.outcome}")
        return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"

    def sharing_mark(self, name: str) -> str:
        """`` (once)`` after a property judged once for every policy, `` (shared)`` after one whose
        examples every policy shared; nothing when each policy judged it alone."""
        kinds = {p.shared for v in self.verdicts for p in v.properties if p.name == name}
        if len(self.verdicts) < 2 or kinds == {""}:
            return ""
        return " (once)" if kinds == {POLICY_FREE} else " (shared)"

    def render_sharing(self, console: Console) -> None:
        """What "(once)" and "(shared)" mean, and the run's notes."""
        marks = {self.sharing_mark(n) for n in self.property_names()}
        if " (once)" in marks:
            console.print(f"(once): {POLICY_FREE}", **PLAIN)
        if " (shared)" in marks:
            console.print(f"(shared): {SAME_ANSWERS}; {LEFT_SHARED_RUN}", **PLAIN)
        for note in self.notes:
            console.print(note, **PLAIN)

    def render(self, console: Console) -> None:
        """The verdict table on the console: properties down, policies across."""
        # Properties down, policies across: there are more properties than fit side by side.
        names = self.property_names()
        table = Table(
            title=f"crossattn-sizing verify  (impl={self.impl}, device={self.device}, profile={self.profile})"
        )
        table.add_column("property", style="bold", overflow="fold")
        for v in self.verdicts:
            table.add_column(v.policy, overflow="fold")
        style = {Outcome.HOLDS: "green", Outcome.FAILS: "red", Outcome.NOT_APPLICABLE: "dim",
                 Outcome.NOT_RUN: "yellow", Outcome.LATENT: "cyan"}  # fmt: skip
        for n in names:
            cells = []
            for v in self.verdicts:
                by_name = {p.name: p for p in v.properties}
                cells.append(f"[{style[by_name[n].outcome]}]{by_name[n].outcome}[/]" if n in by_name else "-")
            table.add_row(n + self.sharing_mark(n), *cells)
        table.add_section()
        table.add_row("expected", *(expected(v) for v in self.verdicts))
        verdict_cells = []
        for v in self.verdicts:
            color = "red" if v.unexpected else ("green" if v.holds else "yellow")
            verdict_cells.append(f"[{color}]{v.outcome}{' (UNEXPECTED)' if v.unexpected else ''}[/]")
        table.add_row("verdict", *verdict_cells)
        console.print(table)
        self.render_sharing(console)
        for v in self.verdicts:
            if v.error:
                console.print(f"\n[red]{v.policy}: could not run: {v.error}[/]")
            for p in v.properties:
                if p.outcome in (Outcome.HOLDS, Outcome.NOT_RUN) and p.reason:  # what a verdict leaves out
                    but = ", but" if p.outcome == Outcome.HOLDS else ""
                    console.print(f"\n{v.policy} / {p.name} {p.outcome}{but}: {p.reason}", **PLAIN)
            for p in v.properties:
                if p.outcome not in (Outcome.FAILS, Outcome.LATENT):
                    continue
                console.print(f"\n[bold]{v.policy} / {p.name}[/] {violated(p.outcome)}:")
                console.print(p.diagnosis.removeprefix("AssertionError: "), **PLAIN)
                for line in p.replay_lines():
                    console.print(line, **PLAIN)
                if p.reason:  # e.g. a failing example the shared run kept, not shrunk
                    console.print(f"  note: {p.reason}", **PLAIN)
        for f in self.findings:
            console.print(f"\n[yellow]finding:[/] [bold]{f.title}[/]")
            console.print(f.detail, **PLAIN)
        status = {
            EXIT_INTERRUPTED: "interrupted: what did not finish is marked interrupted or not run",
            EXIT_FAILS: "a policy expected to hold FAILS",
            EXIT_INCOMPLETE: "nothing failed, but something did not run (see 'not run' above)",
            EXIT_HOLDS: "every policy expected to hold holds",
        }[self.verdict_status]
        console.print(f"\n{status}; exit status {self.exit_status}")
