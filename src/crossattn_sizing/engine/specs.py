"""How a sizing policy or implementation spec names vLLM's own code (no torch imported here).

- ``vllm``: the installed package;
- ``vllm==X``: release X (its wheel unpacked into the engine cache);
- ``vllm@PATH``: a vLLM source tree, a folder holding ``vllm/`` (a checkout of
  a PR branch, or an unpacked wheel), run from its pure-Python files and
  Triton kernels with the same CPU shims; no compiled extension is needed.
"""

from __future__ import annotations

from pathlib import Path

from crossattn_sizing.errors import EngineError

TREE_PREFIX = "vllm@"


def is_engine_spec(spec: str) -> bool:
    """Whether a ``--sizing-policy``/``--policy``/``--impl``/``--engine`` value names vLLM's own code."""
    s = spec.strip()
    return s == "vllm" or s.startswith("vllm==") or s.startswith(TREE_PREFIX)


def tree_root(spec: str) -> Path:
    """The folder holding ``vllm/`` that ``vllm@PATH`` names (``PATH`` may also be that ``vllm/`` itself).

    Raises :class:`EngineError` with the rule when it holds no ``vllm`` package.
    """
    text = spec.strip().removeprefix(TREE_PREFIX)
    if not text:
        raise EngineError(f"{spec.strip()!r}: vllm@PATH needs a path (a folder holding vllm/)")
    path = Path(text).expanduser().resolve()
    if (path / "vllm" / "__init__.py").is_file():
        return path
    if path.name == "vllm" and (path / "__init__.py").is_file():
        return path.parent
    raise EngineError(
        f"{spec.strip()}: {path} has no vllm package (vllm@PATH takes a folder holding vllm/: a source "
        "checkout or an unpacked wheel)"
    )
