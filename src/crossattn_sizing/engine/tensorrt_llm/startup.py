"""TensorRT-LLM's start-up batches (warm-up and profiling requests): where a tree has them, and why they are
not run.

TensorRT-LLM builds requests of its own before serving: the warm-up requests
of ``PyTorchModelEngine._create_warmup_request`` (``model_engine.py``) and the
dummy context requests that size memory in
``KvCacheCreator._create_dummy_context_requests`` (``_util.py``). The harness
runs no adapter for either; this module only says, from the tree's own
files, whether the tree has them (:func:`startup_absence`), so ``verify``
reports the start-up batches as "not run" with the reason, never as a pass.
"""

from __future__ import annotations

import ast
from pathlib import Path

from crossattn_sizing.engine.tensorrt_llm.source import UTIL

MODEL_ENGINE = "tensorrt_llm/_torch/pyexecutor/model_engine.py"

WARMUP_STEPS: tuple[tuple[str, str, str], ...] = (
    (MODEL_ENGINE, "PyTorchModelEngine", "_create_warmup_request"),
    (UTIL, "KvCacheCreator", "_create_dummy_context_requests"),
)
"""``(file, class, method)``: where TensorRT-LLM builds its warm-up and profiling requests."""


class Unreadable(Exception):
    """A file the parser gives up on (a syntax error, a null byte, nesting past the recursion limit)."""


def _line(root: Path, file: str, cls: str, method: str) -> int | None:
    """The line of ``cls.method`` in the tree's ``file``; None where the tree has no such definition;
    :class:`Unreadable` where the file cannot be parsed (so no absence is claimed)."""
    path = root / file
    if not path.is_file():
        return None
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise Unreadable(f"{file}: {type(exc).__name__}") from None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    return item.lineno
    return None


def startup_absence(root: Path) -> str:
    """Why the tree's start-up batches are not run: it has no warm-up path, or it has one the harness has
    no adapter for (named with its ``file:line``)."""
    try:
        found = [f"{file}:{line} ({cls}.{method})" for file, cls, method in WARMUP_STEPS
                 if (line := _line(root, file, cls, method)) is not None]  # fmt: skip
    except Unreadable as exc:
        return f"not run: the harness could not parse the tree for a warm-up path ({exc})"
    if not found:
        named = " nor ".join(f"{cls}.{method} ({file})" for file, cls, method in WARMUP_STEPS)
        return f"not run: the tree has no warm-up path (neither {named})"
    return (f"not run: the tree has {', '.join(found)}; the harness runs no adapter for TensorRT-LLM's "
            "warm-up requests")


__all__ = ["WARMUP_STEPS", "startup_absence"]
