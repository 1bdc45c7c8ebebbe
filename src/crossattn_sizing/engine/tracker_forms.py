"""Each engine's bug-report form, as its tracker asks for it (docs/spec.md, "Bug templates").

``report`` writes an issue in its tracker's own order and headings, with
the title in the tracker's form, and fills the Environment section with the
fields the engine's environment tool prints that this run knows (versions of
Python, torch and the libraries beside it, the engine's release; never a
GPU it did not see). A field the run cannot know is named as such, for the
reporter to fill in from the GPU server.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrackerForm:
    """One tracker's bug form: title prefix, headings in its order, its environment tool and field names."""

    title_prefix: str
    headings: tuple[tuple[str, str], ...]
    """(section key, heading) in the form's order; keys: env, describe, repro, expected, code, fix,
    releases."""
    env_tool: str
    env_labels: tuple[tuple[str, str], ...]
    """(known field, the label the env tool prints it under); known fields: python, platform, cuda, torch,
    numpy, triton, transformers, engine."""
    checklist: tuple[str, ...] = ()


SGLANG = TrackerForm(
    title_prefix="[Bug] ",
    headings=(
        ("describe", "Describe the bug"),
        ("repro", "Reproduction"),
        ("env", "Environment"),
        ("expected", "Expected and actual behaviour"),
        ("code", "Where in the code"),
        ("fix", "Suggested fix"),
        ("releases", "Affected releases"),
    ),
    env_tool="python3 -m sglang.check_env",
    env_labels=(
        ("python", "Python"),
        ("cuda", "CUDA available"),
        ("torch", "PyTorch"),
        ("engine", "sglang"),
        ("triton", "triton"),
        ("transformers", "transformers"),
        ("numpy", "numpy"),
    ),
    checklist=("I searched related issues but found no solution.", "The bug persists in the latest version."),
)
VLLM = TrackerForm(
    title_prefix="[Bug]: ",
    headings=(
        ("env", "Your current environment"),
        ("describe", "Describe the bug"),
        ("repro", "Reproduction"),
        ("expected", "Expected and actual behaviour"),
        ("code", "Where in the code"),
        ("fix", "Suggested fix"),
        ("releases", "Affected releases"),
    ),
    env_tool="python collect_env.py",
    env_labels=(
        ("torch", "PyTorch version"),
        ("python", "Python version"),
        ("platform", "Python platform"),
        ("cuda", "Is CUDA available"),
        ("engine", "vLLM Version"),
        ("numpy", "[pip3] numpy"),
        ("triton", "[pip3] triton"),
        ("transformers", "[pip3] transformers"),
    ),
)
TENSORRT_LLM = TrackerForm(
    title_prefix="[Bug]: ",
    headings=(
        ("env", "System Info"),
        ("describe", "Describe the bug"),
        ("repro", "Reproduction"),
        ("expected", "Expected and actual behavior"),
        ("code", "Where in the code"),
        ("fix", "Suggested fix"),
        ("releases", "Affected releases"),
    ),
    env_tool="the system information the form asks for",
    env_labels=(
        ("platform", "CPU architecture / OS"),
        ("python", "Python"),
        ("torch", "PyTorch"),
        ("engine", "TensorRT-LLM"),
        ("cuda", "GPU"),
    ),
)
FORMS = {"sglang": SGLANG, "vllm": VLLM, "tensorrt_llm": TENSORRT_LLM}
