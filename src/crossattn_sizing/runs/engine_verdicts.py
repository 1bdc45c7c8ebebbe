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
- :func:`from_verify_json` reads the JSON ``verify --json`` writes.

Where a tree's files are (:func:`tree_of`) is here too: the report quotes
them and ``--fix`` copies them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from crossattn_sizing.base.errors import OptionError
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.findings.results import PropertyResult
from crossattn_sizing.runs.verify_report import PolicyVerdict, VerifyReport

SGLANG_PROPERTIES = "properties/test_read_coverage.py"
"""The properties ``verify --engine sglang...`` runs (commands/sglang_verify.py)."""


@dataclass
class EngineVerdicts:
    """One engine spec's verify report, the tree its files are in, and what ran."""

    spec: str
    engine: str  # vllm | sglang
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


def engine_of(spec: str) -> str:
    """``vllm`` or ``sglang``: the engine a spec names (``NAME==X`` or ``NAME@PATH``)."""
    s = spec.strip()
    for name in ("vllm", "sglang"):
        if s.startswith(f"{name}==") or s.startswith(f"{name}@"):
            return name
    raise OptionError("--engine", spec, "report takes vllm==X, vllm@PATH, sglang==X or sglang@PATH")


def tree_of(spec: str) -> Path:
    """The folder holding the engine's package for ``spec``: the tree itself, or the release in the cache."""
    engine = engine_of(spec)
    if engine == "sglang":
        from crossattn_sizing.engine.sglang.install import resolve_sglang
        from crossattn_sizing.engine.sglang.source import sglang_tree_root

        return sglang_tree_root(spec) if "@" in spec else resolve_sglang(spec.strip())[0]
    from crossattn_sizing.engine.install import resolve_release

    release = resolve_release(spec)
    return Path(release.tree) if release.tree is not None else Path(release.paths[0])


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
    notes = [
        f"{spec}: the release's own code, from {root}",
        f"properties run as verify runs them: Hypothesis profile {profile}"
        + (f", seed {seed}" if seed is not None else "")
        + "".join(f", -k {k}" for k in select),
    ]
    family = family_of(spec)
    suite = family.verify_suite(spec)
    if family.subject_spec(spec) is None and suite is not None and suite.sizer is None:
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
