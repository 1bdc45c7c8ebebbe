"""Every printed rerun line names its subject by the spec as typed, and replays the same failure (issue 29).

Each test runs a failing property, takes the ``reproduce:`` line it printed,
runs that line as printed, and checks it fails the same way: a line naming a
display name, a repr or a base class (``--impl torch`` for a ``TorchImpl``
subclass) either does not run or replays something that passes.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from tests.engine_tree import FIXTURES, build_tree
from tests.processes import run

pytestmark = pytest.mark.slow  # each test runs the property suite twice in subprocesses

PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-x", "-q"]
SLOT_TEST = "properties/test_slot_mapping.py::test_slot_mapping_matches_reference"


def reproduce_line(text: str) -> list[str]:
    """The ``reproduce:`` line a failure printed, split as a shell would."""
    found = re.findall(r"reproduce: (.+)", text)
    assert found, text[-3000:]
    return shlex.split(found[-1])


def as_run(words: list[str]) -> list[str]:
    """The printed command with this interpreter: ``pytest ...`` and ``crossattn-sizing ...`` as modules."""
    head = {"pytest": [*PYTEST], "crossattn-sizing": [sys.executable, "-m", "crossattn_sizing"]}[words[0]]
    return [*head, *words[1:]]


@pytest.mark.parametrize("where", [(), ("--in-process",)], ids=["worker", "in-process"])
def test_a_failing_implementation_replays_from_its_printed_line(where: tuple[str, ...]) -> None:
    spec = "tests.broken_impls:SlotOffByOne"  # a TorchImpl subclass: never to be named "torch"
    first = run([*PYTEST, SLOT_TEST, "--impl", spec, *where])
    assert first.returncode == 1, first.stdout[-3000:]
    words = reproduce_line(first.stdout)
    assert words[words.index("--impl") + 1] == spec
    again = run(as_run(words))  # as printed: replayed in a worker whatever the first run did
    assert again.returncode == 1, again.stdout[-3000:]
    assert "on cpu differs from the reference" in again.stdout
    assert reproduce_line(again.stdout) == words


@pytest.mark.parametrize("spec", ["mrv2-prefix", "tests.broken_policies:floor_div"])
def test_a_failing_policy_replays_from_its_printed_line(spec: str) -> None:
    first = run([*PYTEST, "properties/test_capacity.py", "--policy", spec])
    assert first.returncode == 1, first.stdout[-3000:]
    words = reproduce_line(first.stdout)
    assert words[:2] == ["crossattn-sizing", "check"]
    assert words[words.index("--policy") + 1] == spec
    again = run(as_run(words))
    assert again.returncode == 1, again.stdout + again.stderr
    assert "FAIL" in again.stdout


def engine_env(tmp_path: Path) -> dict[str, str]:
    """Offline, with an empty home and an engine cache of the test's own: no download, nothing shared."""
    return {"CROSSATTN_OFFLINE": "1", "CROSSATTN_ENGINE_CACHE": str(tmp_path / "cache"),
            "HOME": str(tmp_path / "home"), "TRITON_INTERPRET": "1", "HF_HUB_OFFLINE": "1"}  # fmt: skip


def test_a_failing_release_policy_replays_from_its_printed_line(tmp_path: Path) -> None:
    """``vllm==0.24.0`` (the pre-fix sizing, its recorded sources placed in the engine cache as an
    unpacked wheel would be): the capacity property fails, and the printed ``check`` line names
    ``vllm==0.24.0`` and fails the same way."""
    env = engine_env(tmp_path)
    build_tree(tmp_path / "cache" / "vllm-0.24.0", "0.24.0")
    first = run([*PYTEST, "properties/test_capacity.py", "--policy", "vllm==0.24.0"], env)
    assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-2000:]
    words = reproduce_line(first.stdout)
    assert words[words.index("--policy") + 1] == "vllm==0.24.0"
    again = run(as_run(words), env)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "FAIL" in again.stdout


def test_a_failing_release_tree_replays_from_its_printed_line(tmp_path: Path) -> None:
    """``vllm@<tree>`` whose ``unified_attention`` lets each query see one key past its causal bound:
    the printed line names the tree as typed (no display name) and replays the same failure."""
    kernel = "triton_unified_attention.py"
    line = "    context_len = seq_len - cur_batch_query_len\n"
    text = (FIXTURES / "0.25.0" / kernel).read_text()
    assert text.count(line) == 1, f"{kernel}: the line to break is not there once"
    tree = build_tree(tmp_path / "tree", "0.25.0", kernels=True,
                      kernel_sources={kernel: text.replace(line, line.rstrip("\n") + " + 1\n")})  # fmt: skip
    spec = f"vllm@{tree}"
    env = engine_env(tmp_path)
    first = run([*PYTEST, "properties/test_attention.py", "-k", "matches_dense", "--impl", spec], env)
    assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-2000:]
    assert "differs from dense attention" in first.stdout
    words = reproduce_line(first.stdout)
    assert words[words.index("--impl") + 1] == spec
    again = run(as_run(words), env)
    assert again.returncode == 1, again.stdout[-3000:]
    assert "differs from dense attention" in again.stdout
