"""The one seam between ``report`` and verify: an engine spec's verdicts, as verify's records.

``report`` reads nothing of a run but what verify reports: a
:class:`~crossattn_sizing.runs.verify_report.VerifyReport` (its policy row's
:class:`~crossattn_sizing.findings.results.PropertyResult` per property: the
verdict, the diagnosis, the shrunk example, the ``check`` line that replays
it) and the provenance notes. Two ways in, both here:

- :func:`run_engine` runs the engine's properties the way ``verify`` runs
  them (the suite runner, :func:`crossattn_sizing.runs.suite.run_suite`):
  every property under ``--policy vllm==X``/``vllm@PATH``; SGLang's read and
  write sides with ``--read-builder SPEC`` as ``verify --engine`` does;
  TensorRT-LLM's cross-pool property with the tree's sizer, as ``verify
  --engine tensorrt_llm@PATH`` does (:func:`~crossattn_sizing.runs.engine_verify.engine_verify`);
- :func:`from_verify_json` reads the JSON ``verify --json`` writes.

Which engines ``report`` runs (:func:`reported_family`, those whose family gives report facts) and
where a tree's files are (:func:`tree_of`, the family's tree) are here too: the report quotes them and
``--fix`` copies them. No engine family is imported here: each is reached through the registry.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from crossattn_sizing.base.errors import OptionError
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.engine.interface import EngineFamily, EngineMode
from crossattn_sizing.engine.registry import engine_name, family, is_engine, names
from crossattn_sizing.findings.results import PropertyResult
from crossattn_sizing.runs.verify_report import PolicyVerdict, VerifyReport


@dataclass
class EngineVerdicts:
    """One engine spec's verify report, the tree its files are in, and what ran."""

    spec: str
    engine: str  # the family's name: vllm, sglang, tensorrt_llm, or an installed engine's
    root: Path  # the folder holding the engine's package
    report: VerifyReport

    @property
    def properties(self) -> list[PropertyResult]:
        """Every property's result, in verify's order."""
        return [p for v in self.report.verdicts for p in v.properties]

    @property
    def failing(self) -> list[PropertyResult]:
        """The properties that fail: each a judged observation about the engine's code."""
        return [p for p in self.properties if p.outcome == Outcome.FAILS]

    @property
    def latent(self) -> list[PropertyResult]:
        """The properties violated only on cases no served request reaches (docs/spec.md §12): said,
        never written up as an issue."""
        return [p for p in self.properties if p.outcome == Outcome.LATENT]


def reported_family(spec: str) -> EngineFamily:
    """The family a ``report --engine`` spec (``NAME==X`` or ``NAME@PATH``) names, when it has report facts;
    anything else is one line naming the specs report takes."""
    s = spec.strip()
    name = engine_name(s)
    if is_engine(name) and s != name:
        found = family(name)
        if found.report_facts() is not None:
            return found
    raise OptionError("--engine", spec, f"report takes {report_specs()}")


def report_specs() -> str:
    """``vllm==X, vllm@PATH, ... or tensorrt_llm@PATH``: the specs of every engine with report facts (a
    name whose family cannot be loaded, or has none, is left out; a tree-only engine, whose facts say why
    it has no releases, takes ``@PATH`` alone)."""
    reported = []
    for name in names():
        try:
            facts = family(name).report_facts()
        except Exception:
            continue
        if facts is not None:
            reported += [f"{name}@PATH"] if facts.no_releases else [f"{name}==X", f"{name}@PATH"]
    return ", ".join(reported[:-1]) + f" or {reported[-1]}" if len(reported) > 1 else "".join(reported)


def tree_of(spec: str) -> Path:
    """The folder holding the engine's package for ``spec``: the tree itself, or the release in the cache."""
    return reported_family(spec).tree(spec)


def shown_path(path: Path) -> str:
    """``path`` as a report shows it: relative to the working folder when it lies under it (the check lines
    then replay from there); any other path as it is, which the report files name by its kind (``<tmp>``,
    ``<cache>``, ``~``: :mod:`crossattn_sizing.runs.report_files`), never the machine's folders."""
    relative = os.path.relpath(path)
    return str(path) if relative == ".." or relative.startswith(".." + os.sep) else relative


def tree_commit(root: Path) -> str:
    """``, git commit SHA`` when ``root`` is the top of a git checkout (``, with uncommitted changes`` when
    its files differ from it); "" otherwise: a tree inside another repository (this project's recorded
    fixtures) is not named by that repository's commit."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)

    try:
        top = git("rev-parse", "--show-toplevel")
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root.resolve():
            return ""
        head, changed = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    except OSError:  # no git on the machine: nothing to name
        return ""
    if head.returncode != 0:
        return ""
    dirty = ", with uncommitted changes" if changed.stdout.strip() else ""
    return f", git commit {head.stdout.strip()}{dirty}"


def shown_spec(spec: str) -> str:
    """``NAME@PATH`` with PATH relative to the working folder (what a report prints, and runs the same
    from here); any other spec as given."""
    s = spec.strip()
    name, at, path = s.partition("@")
    if not at or not Path(path).expanduser().is_absolute():
        return s
    return f"{name}@{shown_path(Path(path).expanduser())}"


def run_engine(spec: str, *, profile: str, seed: int | None, select: list[str]) -> EngineVerdicts:
    """Run the engine's properties on ``spec`` as verify does; its report (never read from printed text).

    An engine whose release is a sizing policy (vLLM) runs every property under ``--policy SPEC``; any
    other runs its family's verify suite (:func:`crossattn_sizing.runs.engine_verify.engine_verify`).
    """
    from crossattn_sizing.runs.engine_verify import engine_verify
    from crossattn_sizing.runs.suite import run_suite

    found = reported_family(spec)
    engine = found.name
    root = found.tree(spec)  # resolves (downloads) now: a bad spec is bad input before any property
    where = f", from {shown_path(root)}{tree_commit(root)}" if "@" in spec else ""
    notes = [
        f"{spec}: the release's own code{where}",
        f"properties run as verify runs them: Hypothesis profile {profile}"
        + (f", seed {seed}" if seed is not None else "")
        + "".join(f", -k {k}" for k in select),
    ]
    if found.mode is not EngineMode.SUBJECT:  # its property files, or its sizer's property
        suite = found.verify_suite(spec)
        note = found.obtain(spec)  # its worker started: a tree that cannot load is bad input here
        # Start-up findings have no tracker template yet: report runs the suite without them.
        report = engine_verify(spec, suite, profile=profile, max_examples=None, seed=seed,
                               select=select, notes=[*notes, note], family=found, startup=False)  # fmt: skip
        return EngineVerdicts(spec, engine, root, report)
    results, _ = run_suite(spec, profile=profile, seed=seed, select=select, allow_empty=bool(select))
    verdict = PolicyVerdict(spec, expected_to_hold=True, properties=results)
    report = VerifyReport(profile, "torch", "cpu", seed, [verdict], notes=notes)
    return EngineVerdicts(spec, engine, root, report)
