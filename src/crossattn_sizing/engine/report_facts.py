"""What ``report`` needs to know about an engine to phrase an issue its maintainers can act on.

The report itself (``runs/issue_report.py``) is engine-neutral: it reads a
verify run's verdicts. Each engine adds small facts declared here, in its own
sub-package (``engine/vllm/report_facts.py``, ``engine/sglang/report_facts.py``,
``engine/tensorrt_llm/report_facts.py``, given by its family's ``report_facts()``):

- per failing property: the step that failed, the title's wording and what the
  failure does on a GPU;
- where in the release the observation was made: a frame the run recorded
  (SGLang's guarded read), else the line the engine's own sizing executes
  (vLLM), found in that release's file, never assumed from a version;
- the minimal case as the engine's users state it (model shape, server
  options, requests), read from the failure's ``check`` line;
- where its release table comes from (the audit for vLLM, the check line on
  each release for SGLang) and which releases it lists (none for TensorRT-LLM,
  run from a tree only, saying why).

Where a spec's tree is, the family says (``tree()``, :mod:`crossattn_sizing.engine.interface`).
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
    no_releases: str = ""
    """Why the engine has no release table, when :attr:`releases` is empty (a tree-only engine)."""
    summary: Callable[[str, str], str] = lambda name, release: ""
    """(property, release) -> the issue's plain first paragraph: symptom, models, default backend, the
    trigger as one condition over the batch, since which release (no harness words); "" for none."""
    expected: Callable[[str], str] = lambda name: ""
    """Property -> what the engine should do (the actual is the standalone repro's output)."""
    sites: Callable[[Path], list[tuple[Excerpt, str, tuple[int, ...]]]] = lambda root: []
    """Tree root -> every code site of the defect (eager and replay): its lines, what it does, the numbers of
    its causing lines (marked in the report)."""
    repro: Callable[[Sequence[str], Path, str], str | None] = lambda argv, root, release: None
    """(check argv, tree root, release label) -> a standalone ``repro.py`` (torch and numpy only)."""
    served: Callable[[Sequence[str]], Served | None] = lambda argv: None
    """Check argv -> the same case on a server: launch command and client; None when no server reaches it."""
    fixed_upstream: Callable[[str, str], str] = lambda name, release: ""
    """(property, release) -> "Fixed in X by PR #N ..." when the release is older than the fix, else ""."""
    refuses: Callable[[str], str] = lambda release: ""
    """Release -> how it refuses a batch of this kind ("" when it takes it): said in the release table."""


NAMESPACE = ("class Namespace:", "    def __init__(self, **fields):", "        self.__dict__.update(fields)")
"""A standalone script's stand-in object: the fields the release's lines read, and nothing else."""
PNG_HELPER = (
    "def png(width, height):  # a plain grey PNG of that size, from the standard library",
    "    raw = b''.join(b'\\x00' + b'\\x80' * (3 * width) for _ in range(height))",
    "    chunk = lambda kind, data: (struct.pack('>I', len(data)) + kind + data",
    "                                + struct.pack('>I', zlib.crc32(kind + data)))",
    "    head = struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)",
    "    body = chunk(b'IHDR', head) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b'')",
    "    return b'\\x89PNG\\r\\n\\x1a\\n' + body",
)
"""A served reproduction's client's image maker: an image of the size the model's preprocessing needs."""


@dataclass(frozen=True)
class Served:
    """A failure's case on a real server: what it needs, how to start it, and a client sending the batch."""

    gpu: str
    launch: str
    client: str
    note: str = ""


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


@dataclass(frozen=True)
class Excerpt:
    """Whole statements of a release file, verbatim, with where they are (for a repro and a code site)."""

    file: str
    first: int  # the 1-based number of the first line
    lines: tuple[str, ...]

    @property
    def where(self) -> str:
        """``file:first`` or ``file:first-last``."""
        last = self.first + len(self.lines) - 1
        return f"{self.file}:{self.first}" + (f"-{last}" if last != self.first else "")

    def body(self, prefix: str = "    ") -> list[str]:
        """The lines as a block of a script's function body, headed by a comment naming ``file:line``."""
        return [f"{prefix}# {self.where}", *self.indented(prefix)]

    def indented(self, prefix: str) -> list[str]:
        """The lines with their common indentation replaced by ``prefix`` (a function body's)."""
        cut = min((len(x) - len(x.lstrip()) for x in self.lines if x.strip()), default=0)
        return [prefix + x[cut:] if x.strip() else "" for x in self.lines]


def _depth(text: str) -> int:
    """Open brackets left by ``text`` (a comment after ``#`` ignored; strings hold no brackets here)."""
    code = text.split("#", 1)[0]
    return sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")


def excerpt(root: Path, file: str, start: str, end: str = "", after: Sequence[str] = ()) -> Excerpt | None:
    """The statements of ``root/file`` from the first line holding ``start`` (past the lines holding each of
    ``after``, in order) to the first line holding ``end`` (``start``'s line when empty), extended until its
    brackets close; None when a needle is not found (another release's layout)."""
    path = root / file
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    i = 0
    for needle in (*after, start):
        while i < len(text) and needle not in text[i]:
            i += 1
        if i == len(text):
            return None
    j = i
    while end and j < len(text) and end not in text[j]:
        j += 1
    if j == len(text):
        return None
    depth = sum(_depth(x) for x in text[i : j + 1])
    while depth > 0 and j + 1 < len(text):
        j += 1
        depth += _depth(text[j])
    return Excerpt(file, i + 1, tuple(text[i : j + 1]))
