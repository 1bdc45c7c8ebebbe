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

Where a tree's files are (:func:`tree_of`) is here too: the report quotes
them and ``--fix`` copies them.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from crossattn_sizing.base.errors import OptionError
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.engine.registry import engine_name
from crossattn_sizing.engine.report_engines import ACCEPTED, facts_for
from crossattn_sizing.findings.results import PropertyResult
from crossattn_sizing.runs.verify_report import PolicyVerdict, VerifyReport

SGLANG_PROPERTIES = "properties/test_read_coverage.py"
"""The properties ``verify --engine sglang...`` runs (commands/sglang_verify.py)."""


@dataclass
class EngineVerdicts:
    """One engine spec's verify report, the tree its files are in, and what ran."""

    spec: str
    engine: str  # vllm | sglang | tensorrt_llm
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


def engine_of(spec: str) -> str:
    """The engine a spec names (``NAME==X`` or ``NAME@PATH``) whose family has report facts
    (:func:`~crossattn_sizing.engine.report_engines.facts_for`); any other spec is one line."""
    s = spec.strip()
    name = engine_name(s)
    if name and s.startswith((f"{name}==", f"{name}@")):
        return facts_for(s).engine
    raise OptionError("--engine", spec, ACCEPTED)


def tree_of(spec: str) -> Path:
    """The folder holding the engine's package for ``spec``: the tree itself, or the release in the cache
    (the engine's report facts say where, when it resolves its trees itself: TensorRT-LLM)."""
    engine = engine_of(spec)
    tree = facts_for(spec).tree
    if tree is not None:
        return tree(spec)
    if engine == "sglang":
        from crossattn_sizing.engine.sglang.install import resolve_sglang
        from crossattn_sizing.engine.sglang.source import sglang_tree_root

        return sglang_tree_root(spec) if "@" in spec else resolve_sglang(spec.strip())[0]
    from crossattn_sizing.engine.install import resolve_release

    release = resolve_release(spec)
    return Path(release.tree) if release.tree is not None else Path(release.paths[0])


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
    from crossattn_sizing.engine.registry import family_of
    from crossattn_sizing.runs.engine_verify import engine_verify
    from crossattn_sizing.runs.suite import run_suite

    engine = engine_of(spec)
    root = tree_of(spec)  # resolves (downloads) now: a bad spec is bad input before any property
    where = f", from {shown_path(root)}{tree_commit(root)}" if "@" in spec else ""
    notes = [
        f"{spec}: the release's own code{where}",
        f"properties run as verify runs them: Hypothesis profile {profile}"
        + (f", seed {seed}" if seed is not None else "")
        + "".join(f", -k {k}" for k in select),
    ]
    family = family_of(spec)
    suite = family.verify_suite(spec)
    if family.subject_spec(spec) is None and suite is not None:
        note = family.obtain(spec)  # its worker started: a tree that cannot load is bad input here
        # Start-up findings have no tracker template yet: report runs the suite without them.
        report = engine_verify(spec, suite, profile=profile, max_examples=None, seed=seed,
                               select=select, notes=[*notes, note], startup=False)  # fmt: skip
        return EngineVerdicts(spec, engine, root, report)
    if family.subject_spec(spec) is None:
        raise OptionError("--engine", spec, "its engine has no verify suite of property files: report has "
                          "nothing to run")  # fmt: skip
    results, _ = run_suite(spec, profile=profile, seed=seed, select=select, allow_empty=bool(select))
    verdict = PolicyVerdict(spec, expected_to_hold=True, properties=results)
    report = VerifyReport(profile, "torch", "cpu", seed, [verdict], notes=notes)
    return EngineVerdicts(spec, engine, root, report)
