"""The audit's Markdown report file (``audit --markdown FILE``), written from the verdicts alone.

Its first line is the command that regenerates it, so the file in
``reports/`` is never edited by hand: every figure (verdicts, counterexamples,
matching rules, wall times, wheel checksums) comes from the run that wrote it.
"""

from __future__ import annotations

import datetime
import os

from crossattn_sizing.audit.extract import RUNNERS
from crossattn_sizing.audit.verdicts import RunnerVerdict
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.commands.audit_report import (
    EXIT_MEANINGS,
    column_title,
    columns,
    detail_lines,
    exit_status,
)

Results = list[tuple[str, list[RunnerVerdict]]]


def _cell(verdict: RunnerVerdict | None) -> str:
    if verdict is None:
        return "not asked"
    if verdict.outcome == Outcome.HOLDS:
        text = f"holds ({verdict.configs_checked} configs)"
    elif verdict.outcome == Outcome.FAILS:
        text = f"**fails**: {verdict.configs_failing} of {verdict.configs_checked} configs"
        n = verdict.nemotron
        if n is not None and not n["holds"]:
            text += f"; Nemotron-Parse {n['columns_needed']} needed, {n['columns_given']} given"
        w = verdict.whisper
        if w is not None:
            text += "; Whisper fits" if w["holds"] else "; Whisper overflows"
    elif verdict.outcome == Outcome.ABSENT:
        text = "absent (no such runner in this release)"
    elif verdict.outcome == Outcome.NOT_RUN:
        text = f"not run: {verdict.reason}"
    else:
        text = f"could not be read: {verdict.reason}"
    if verdict.scope is not None and verdict.outcome != Outcome.UNREADABLE:
        text += f"; serves {verdict.scope.text}"
    return text.replace("|", "\\|")


def _wall(verdict: RunnerVerdict | None) -> str:
    return "-" if verdict is None or verdict.wall_s is None else f"{verdict.wall_s:.1f} s"


def _verdict_table(results: Results, runners: list[str]) -> list[str]:
    head = ["vLLM"]
    for key in runners:
        head += [column_title(key), "path", "wall"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for label, verdicts in results:
        by_runner = {v.runner: v for v in verdicts}
        row = [label]
        for key in runners:
            v = by_runner.get(key)
            row += [_cell(v), v.path if v else "-", _wall(v)]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _rule_table(results: Results) -> list[str]:
    lines = [
        "| vLLM | runner | rows store | matches built-in | sizing rule read |",
        "| --- | --- | --- | --- | --- |",
    ]
    for label, verdicts in results:
        for v in verdicts:
            if v.outcome not in (Outcome.HOLDS, Outcome.FAILS):
                continue
            if v.matches:
                match = ", ".join(f"`{m}`" for m in v.matches)
            elif v.closest is not None:
                c = v.closest
                match = f"none; closest `{c['policy']}` ({c['agreeing_configs']}/{c['configs']})"
            else:
                match = "none"
            rule = "; or ".join(v.rules) if v.rules else "none of the harness's rules"
            if v.runner not in RUNNERS:  # a start-up column has no sizing rule
                continue
            title = RUNNERS[v.runner].title
            lines.append(f"| {label} | {title} | {v.row_entries or '-'} | {match} | {rule} |")
    return lines


def render_markdown(results: Results, command: str, provenance: dict[str, str], configs: int) -> str:
    """The whole report as Markdown; ``provenance`` maps each release label to its source's identity."""
    runners = columns(results)
    verdicts = [v for _, vs in results for v in vs]
    total = sum(v.wall_s or 0.0 for v in verdicts)
    status = exit_status(verdicts)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        f"Regenerate: `{command}`",
        "",
        "# Audit of vLLM releases: cross-attention block-table sizing",
        "",
        f"Written by the command above on {stamp} ({os.cpu_count()} CPUs, {total:.0f} s of audit wall time "
        "in all); not edited by hand. `python3 -m nox -s audit` runs the same over 0.19.0-0.34.0, after "
        "the wheel tests (`pytest -m audit_wheels`).",
        "",
        'Path "read": the runner\'s sizing is read from the release\'s source (the wheel\'s syntax tree; '
        "nothing of vLLM is installed, imported or run) and evaluated per config by the harness's "
        f"restricted interpreter, then checked on a fixed sweep of {configs} configs (Nemotron-Parse first). "
        'Path "executed": the release\'s own `initialize_kv_cache` ran in a worker process on CPU (see '
        "docs/engine.md) and its widths were checked on the same sweep. Wall time is per runner: reading "
        "or executing, the sweep, the comparisons with the built-in policies (an executed runner's worker "
        "start-up is not counted).",
        "",
        "## Verdicts",
        "",
        *_verdict_table(results, runners),
        "",
        f"Exit status {status}: {EXIT_MEANINGS[str(status)]}.",
        "",
        "## Sizing rule each release implements",
        "",
        *_rule_table(results),
        "",
        "## Details",
        "",
    ]
    for label, vs in results:
        out += [f"### {label}", "", "```"]
        for v in vs:
            out += detail_lines(v)
        out += ["```", ""]
    out += ["## Sources", "", "```"]
    out += [f"{label}: {provenance.get(label, '?')}" for label, _ in results]
    out += ["```", ""]
    return "\n".join(out)
