"""Which encoder-decoder models a release's ModelRunner V2 serves, read from its model-state dispatch.

A sizing formula can be wrong and still harmless where the runner never runs
the models it would break: before 0.24.0, V2 gave an encoder-decoder model
state only to ``WhisperForConditionalGeneration`` (named in
``init_model_state`` of ``model_states/__init__.py``), and Whisper's
``max_source_positions`` covers its encoder. From 0.24.0 any model with
``CrossAttention`` layers gets one. The audit reports the formula's verdict
either way; this reading is a note beside it, naming the line it comes from,
so a reader can weigh the verdict.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from crossattn_sizing.audit.modules import ModuleIndex

DISPATCH_PATH = "vllm/v1/worker/gpu/model_states/__init__.py"
CROSS_ATTENTION_CLASS = "CrossAttention"


@dataclass(frozen=True)
class Scope:
    """The V2 runner's encoder-decoder scope: ``text`` for the report, ``where`` the line it is read at."""

    text: str
    where: str | None

    def to_dict(self) -> dict[str, str | None]:
        """The scope as the JSON report writes it."""
        return {"text": self.text, "where": self.where}


def _architecture_tests(tree: ast.AST) -> list[tuple[str, int]]:
    """``"Arch" in ....architectures`` tests: (architecture, line)."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant)
            and isinstance(node.left.value, str)
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.In)
            and isinstance(node.comparators[0], ast.Attribute)
            and node.comparators[0].attr == "architectures"
        ):
            found.append((node.left.value, node.lineno))
    return found


def _cross_attention_test(tree: ast.AST) -> int | None:
    """The line of an ``isinstance(..., CrossAttention)`` test, if any."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
            and isinstance(node.args[1], ast.Name)
            and node.args[1].id == CROSS_ATTENTION_CLASS
        ):
            return node.lineno
    return None


def v2_encoder_decoder_scope(index: ModuleIndex) -> Scope:
    """Read which models the V2 runner treats as encoder-decoder; says so when it cannot tell."""
    module = index.module_for_path(DISPATCH_PATH)
    if module is None:
        return Scope(f"not read: {DISPATCH_PATH} is not in this release", None)
    # The dispatch is init_model_state, or from 0.29.0 a helper next to it (resolve_model_state_cls).
    line = _cross_attention_test(module.tree)
    if line is not None:
        return Scope(f"every model with {CROSS_ATTENTION_CLASS} layers", f"{DISPATCH_PATH}:{line}")
    tests = _architecture_tests(module.tree)
    if tests:
        names = ", ".join(dict.fromkeys(name for name, _ in tests))
        return Scope(f"only the architectures {names}", f"{DISPATCH_PATH}:{tests[0][1]}")
    return Scope(f"not read: {DISPATCH_PATH} tests neither architectures nor CrossAttention layers", None)
