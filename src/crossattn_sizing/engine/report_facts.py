"""What ``report`` needs to know about an engine to phrase an issue its maintainers can act on.

The report itself (``runs/issue_report.py``) is engine-neutral: it reads a
verify run's verdicts. Each engine adds small facts declared here, in its own
sub-package (``engine/vllm/report_facts.py``, ``engine/sglang/report_facts.py``,
given by its family's ``report_facts()``):

- per failing property: the step that failed, the title's wording and what the
  failure does on a GPU;
- where in the release the observation was made: a frame the run recorded
  (SGLang's guarded read), else the line the engine's own sizing executes
  (vLLM), found in that release's file, never assumed from a version;
- the minimal case as the engine's users state it (model shape, server
  options, requests), read from the failure's ``check`` line;
- where its release table comes from (the audit for vLLM, the check line on
  each release for SGLang) and which releases it lists.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from crossattn_sizing.base.errors import OptionError

SPEC = "SPEC"
"""The placeholder a :attr:`ReportFacts.deployed` argv names the engine by (replaced by :func:`with_spec`)."""


@dataclass(frozen=True)
class StepFacts:
    """One failing property, said as the engine's step: title, step and GPU consequence."""

    title: str
    """The issue title: engine, step and consequence, e.g. "FA3 decode metadata reads past ..."."""
    step: str
    """The engine's step that misbehaves, in its maintainers' words."""
    gpu: str
    """What happens on a GPU: a device-side assert, an illegal memory access, or silent garbage."""


@dataclass(frozen=True)
class CodeSite:
    """A file and line of the release where the observation was made, with the lines quoted from it."""

    file: str  # relative to the tree root (the folder holding the engine's package)
    line: int
    how: str  # how the line was found: a recorded frame, or the sizing line of the executed method
    quoted: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class ReportFacts:
    """Everything engine-specific the report asks of one engine."""

    engine: str  # "vllm", "sglang": the spec's prefix
    tracker: str  # the engine's project name as its tracker shows it
    steps: Callable[[str], StepFacts]
    """Property name (``file::test``) -> its step facts."""
    minimal_case: Callable[[Sequence[str]], list[str]]
    """The failure's ``check`` argv -> Markdown bullet lines: model shape, server options, requests."""
    site: Callable[[str, Path, str, Sequence[str]], CodeSite | None]
    """(property, tree root, spec, check argv) -> where in the release the observation was made."""
    releases: tuple[str, ...]
    """The releases of the engine's release table, oldest first (each row is run, never assumed)."""
    release_source: str  # "audit" (vLLM's sizing audit) or "check" (the check line on each release)
    spec_option: str  # the check line's option naming the engine spec: --policy (vLLM) or --engine (SGLang)
    deployed: Callable[[str], list[str] | None] = lambda name: None
    """Property -> a check argv (spec: :data:`SPEC`) of the case as deployed (the issue's model and server
    options), run beside the shrunk case and shown when it fails too; None when there is none."""
    notes: tuple[str, ...] = field(default_factory=tuple)


def check_args(line: str) -> list[str]:
    """A ``crossattn-sizing check ...`` line as its argument list (after ``crossattn-sizing``)."""
    words = shlex.split(line)
    if len(words) < 2 or words[0] != "crossattn-sizing" or words[1] != "check":
        raise OptionError("reproduce line", line, "is not a crossattn-sizing check line")
    return words[1:]


def option_value(argv: Sequence[str], option: str) -> str | None:
    """The value of ``option`` in ``argv`` (``--x V`` or ``--x=V``), or None."""
    for i, word in enumerate(argv):
        if word == option and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(option + "="):
            return word.split("=", 1)[1]
    return None


def with_spec(argv: Sequence[str], option: str, spec: str) -> list[str]:
    """``argv`` with the engine spec after ``option`` replaced (the same case on another tree)."""
    out = list(argv)
    for i, word in enumerate(out):
        if word == option and i + 1 < len(out):
            out[i + 1] = spec
            return out
        if word.startswith(option + "="):
            out[i] = f"{option}={spec}"
            return out
    raise OptionError("reproduce line", shlex.join(argv), f"names no {option}")


def quote_lines(
    root: Path, file: str, line: int, before: int = 2, after: int = 3
) -> tuple[tuple[int, str], ...]:
    """Lines ``line - before .. line + after`` of ``root/file``, numbered as in the release."""
    text = (root / file).read_text(encoding="utf-8", errors="replace").splitlines()
    lo, hi = max(1, line - before), min(len(text), line + after)
    return tuple((n, text[n - 1]) for n in range(lo, hi + 1))


def first_line_with(root: Path, file: str, needle: str) -> int | None:
    """The 1-based number of the first line of ``root/file`` containing ``needle``; None when none does."""
    path = root / file
    if not path.is_file():
        return None
    for n, text in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if needle in text:
            return n
    return None
