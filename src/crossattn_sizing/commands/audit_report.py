"""The audit's report: a releases x runners table, the details behind each cell, and JSON.

Exit statuses (documented in ``crossattn-sizing audit --help``): 0 when every
runner a release has was read and holds, 1 when some runner fails, 3 when
nothing fails but some runner could not be read, or a release has none of the
runners asked for (so an unreadable release never passes as a holding one). A
runner a release does not have at all (ModelRunner V1 from 0.34.0) is
"absent": not a pass, and no reason for exit 3 while another runner of that
release was checked. User errors (unknown version, download failure) exit 2 from the
CLI before any report.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from crossattn_sizing.audit.extract import RUNNERS
from crossattn_sizing.audit.verdicts import RunnerVerdict
from crossattn_sizing.base.outcome import EXIT_FAILS, EXIT_HOLDS, EXIT_INCOMPLETE, Outcome
from crossattn_sizing.base.outcome import exit_status as outcome_exit_status

EXIT_MEANINGS = {
    str(EXIT_HOLDS): "every runner present holds",
    str(EXIT_FAILS): "some runner fails",
    str(EXIT_INCOMPLETE): "some runner could not be read, or a release had none of the runners",
}
_STYLE = {Outcome.HOLDS: "green", Outcome.FAILS: "bold red", Outcome.UNREADABLE: "yellow",
          Outcome.ABSENT: "dim", Outcome.NOT_RUN: "yellow"}  # fmt: skip


def column_title(key: str) -> str:
    """A column's title: a sizing runner's, or a start-up column's."""
    from crossattn_sizing.audit.startup import COLUMNS

    return RUNNERS[key].title if key in RUNNERS else COLUMNS[key]


def columns(results: list[tuple[str, list[RunnerVerdict]]]) -> list[str]:
    """The columns of the table, in order: the sizing runners asked for, then the start-up columns."""
    from crossattn_sizing.audit.startup import COLUMNS

    return [key for key in [*RUNNERS, *COLUMNS] if any(v.runner == key for _, vs in results for v in vs)]


def exit_status(verdicts: list[RunnerVerdict]) -> int:
    """0 all present runners hold, 1 some fail, 3 some could not be read or a release had nothing to check."""
    by_release: dict[str, set[Outcome]] = {}
    # A start-up column that did not run is printed with why; it is not a sizing runner left unread.
    verdicts = [v for v in verdicts if not (v.runner.startswith("startup-") and not v.outcome.judged)]
    for v in verdicts:
        by_release.setdefault(v.source, set()).add(v.outcome)
    # A release with none of the runners asked for checked nothing: not run, as an unreadable one.
    nothing = [Outcome.NOT_RUN for s in by_release.values() if s == {Outcome.ABSENT}]
    return outcome_exit_status([v.outcome for v in verdicts] + nothing)


def _cell(verdict: RunnerVerdict | None) -> str:
    if verdict is None:
        return "-"
    text = f"[{_STYLE[verdict.outcome]}]{verdict.outcome}[/]"
    if verdict.outcome in (Outcome.UNREADABLE, Outcome.ABSENT):
        return text + _path_and_time(verdict)
    if verdict.outcome == Outcome.HOLDS:
        text = f"{text}\n{verdict.configs_checked} configs"
    elif verdict.nemotron is not None and not verdict.nemotron["holds"]:
        n = verdict.nemotron
        text = f"{text}\nNemotron: {n['columns_needed']} needed, {n['columns_given']} given"
    elif verdict.counterexample is not None:
        c = verdict.counterexample
        text = f"{text}\n{c.needed} needed, {c.given} given"
    if verdict.matches:
        text += f"\n= {escape(', '.join(verdict.matches))}"
    elif verdict.rules:
        text += f"\n= {escape(verdict.rules[0])}"
    return text + _path_and_time(verdict)


def symbolic_cell(verdict: RunnerVerdict | None) -> str:
    """``prove --symbolic``'s answer for a release's V2 runner: proved, a replayed model, or not run."""
    if verdict is None or verdict.symbolic is None:
        return "-"
    proof = verdict.symbolic
    if proof.get("proved_for_all_configs"):
        return f"[green]proved[/]\n[dim]{proof.get('paths', 0)} paths, {proof.get('seconds', 0):.1f} s[/]"
    if proof.get("verdict") == Outcome.FAILS.value:
        model = proof.get("model") or {}
        return f"[red]fails[/]\nM={model.get('max_model_len')}, e={proof.get('encoder_len')}"
    return f"[yellow]not run[/]\n{escape(str(proof.get('detail', '')))}"


def _path_and_time(verdict: RunnerVerdict) -> str:
    wall = "" if verdict.wall_s is None else f", {verdict.wall_s:.1f} s"
    return f"\n[dim]{verdict.path}{wall}[/]"


def render(results: list[tuple[str, list[RunnerVerdict]]], console: Console | None = None) -> None:
    """Print the table and one detail block per verdict that is not a plain "holds"."""
    console = console or Console(highlight=False)
    runners = columns(results)
    table = Table(title="Cross-attention block-table sizing of vLLM releases", show_lines=True)
    table.add_column("vLLM")
    for key in runners:
        table.add_column(column_title(key))
    symbolic = any(v.symbolic is not None for _, vs in results for v in vs)
    if symbolic:
        table.add_column("proved for all configs (V2)")
    for label, verdicts in results:
        by_runner = {v.runner: v for v in verdicts}
        proof = [symbolic_cell(by_runner.get("v2"))] if symbolic else []
        table.add_row(escape(label), *(_cell(by_runner.get(key)) for key in runners), *proof)
    console.print(table)
    for _, verdicts in results:
        for verdict in verdicts:
            for line in detail_lines(verdict):
                console.print(escape(line), soft_wrap=True)


def detail_lines(verdict: RunnerVerdict) -> list[str]:
    """Plain-text lines explaining one verdict (counterexample, reproduction, reason, matching rule)."""
    head = f"{verdict.source} {verdict.title}: {verdict.outcome}"
    if verdict.outcome in (Outcome.UNREADABLE, Outcome.ABSENT) and verdict.where is None:
        why = f" (executing it failed too: {verdict.path_why})" if verdict.path_why else ""
        return [f"{head}: {verdict.reason}{why}"]
    lines = [f"{head} ({verdict.where})"]
    if verdict.outcome == Outcome.UNREADABLE:
        lines.append(f"  {verdict.reason}")
    if verdict.outcome == Outcome.FAILS and verdict.counterexample is not None:
        c = verdict.counterexample
        lines.append(
            f"  counterexample ({c.invariant}, cross group {c.group}): {c.config.describe()}: "
            f"{c.num_tokens} admitted encoder tokens need {c.needed} columns, the row has {c.given} "
            f"({verdict.configs_failing} of {verdict.configs_checked} configs fail)"
        )
    if verdict.nemotron is not None and verdict.outcome == Outcome.FAILS:
        n = verdict.nemotron
        outcome = "overflows" if not n["holds"] else "fits"
        lines.append(
            f"  Nemotron-Parse-like reproduction (2048x1664 page, {n['encoder_len']} encoder tokens; "
            f"{n['config']}): {n['columns_needed']} columns needed, {n['columns_given']} given: {outcome}"
        )
    if verdict.whisper is not None and verdict.outcome == Outcome.FAILS:
        w = verdict.whisper
        outcome = (
            "fits"
            if w["holds"]
            else (f"overflows at {w['config']}: {w['columns_needed']} needed, {w['columns_given']} given")
        )
        lines.append(f"  Whisper ({w['encoder_len']} frames, {w['configs']} block shapes): {outcome}")
    if verdict.outcome != Outcome.UNREADABLE:
        lines.extend(_rule_lines(verdict))
    if verdict.scope is not None:
        where = f" ({verdict.scope.where})" if verdict.scope.where else ""
        lines.append(f"  encoder-decoder models this runner serves: {verdict.scope.text}{where}")
    for condition in verdict.conditions:
        lines.append(f"  note: the tables checked are built when `{condition}` (undecidable from the config)")
    if verdict.path_why:
        lines.append(f"  path: read from the source; executing the release failed: {verdict.path_why}")
    return lines


def _rule_lines(verdict: RunnerVerdict) -> list[str]:
    lines = []
    if verdict.row_entries is not None:
        lines.append(f"  rows store {verdict.row_entries}: {verdict.row_entries_why}")
    if verdict.matches:
        lines.append(f"  matches built-in policy {', '.join(verdict.matches)} on every checked config")
    elif verdict.closest is not None:
        c = verdict.closest
        d = c["first_difference"]
        lines.append(
            f"  matches no built-in policy; closest {c['policy']} ({c['agreeing_configs']} of "
            f"{c['configs']} configs), first difference at {d['config']}: "
            f"extracted {d['extracted']}, built-in {d['builtin']}"
        )
    if verdict.rules:
        lines.append(f"  sizing rule: {'; or '.join(verdict.rules)}")
    elif verdict.closest is not None:
        lines.append("  no (length, alignment) rule of the harness reproduces these widths")
    return lines


def to_json(results: list[tuple[str, list[RunnerVerdict]]]) -> dict[str, Any]:
    """The same verdicts as a JSON-ready dict."""
    verdicts = [v for _, vs in results for v in vs]
    return {
        "exit_status": exit_status(verdicts),
        "exit_statuses": EXIT_MEANINGS,
        "results": [v.to_dict() for v in verdicts],
    }
