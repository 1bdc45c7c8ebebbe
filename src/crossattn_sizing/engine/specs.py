"""How a sizing policy or implementation spec names vLLM's own code (no torch imported here).

- ``vllm``: the installed package;
- ``vllm==X``: release X (its wheel unpacked into the engine cache);
- ``vllm@PATH``: a vLLM source tree, a folder holding ``vllm/`` (a checkout of
  a PR branch, or an unpacked wheel), run from its pure-Python files and
  Triton kernels with the same CPU shims; no compiled extension is needed.
"""

from __future__ import annotations

from pathlib import Path

from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.base.pathkinds import input_folder_problem

TREE_PREFIX = "vllm@"


def is_engine_spec(spec: str) -> bool:
    """Whether a ``--policy``/``--impl``/``--engine`` value names vLLM's own code."""
    s = spec.strip()
    return s == "vllm" or s.startswith("vllm==") or s.startswith(TREE_PREFIX)


def tree_root(spec: str, package: str = "vllm", marker: str = "__init__.py") -> Path:
    """The folder holding ``package/`` that ``package@PATH`` names (``PATH`` may also be that folder itself).

    ``marker`` is what makes a folder the package (``__init__.py`` for vLLM;
    ``srt`` for SGLang, whose recorded trees carry only the files that run).
    Raises :class:`ReleaseUnavailable` with the rule when it holds no such package.
    """
    text = spec.strip().removeprefix(f"{package}@")
    if not text:
        raise ReleaseUnavailable(
            f"{spec.strip()!r}: {package}@PATH needs a path (a folder holding {package}/)"
        )
    given = Path(text).expanduser()
    problem = input_folder_problem(given)  # a link loop, a FIFO or a device is refused before any use
    if problem is not None and problem != "does not exist":
        rule = f"{package}@PATH takes a folder holding {package}/"
        raise ReleaseUnavailable(f"{spec.strip()}: {given} {problem} ({rule})")
    try:
        path = given.resolve()
    except (OSError, RuntimeError) as exc:  # a loop found while resolving (RuntimeError before 3.13)
        raise ReleaseUnavailable(f"{spec.strip()}: {given} cannot be resolved ({exc})") from None
    if (path / package / marker).exists():
        return path
    if path.name == package and (path / marker).exists():
        return path.parent
    raise ReleaseUnavailable(
        f"{spec.strip()}: {path} has no {package} package ({package}@PATH takes a folder holding {package}/: "
        "a source checkout or an unpacked wheel)"
    )
