"""verify of one policy that reads an engine's code runs its tests in two judge processes (issue 39).

The split is by test, not by file (one file's attention tests are most of an
engine's run); every test runs exactly once, and the verdicts are those of one
process: each test draws its examples from its own seed.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crossattn_sizing.runs.share_process import ENGINE_WEIGHTS, split_tests, suite_units
from crossattn_sizing.runs.suite import properties_dir
from tests.engine_tree import build_tree

FILES = sorted(properties_dir().glob("test_*.py"))


def _tests(files: list[Path]) -> set[str]:
    """Every top-level test of the suite, as ``file::test``."""
    return {
        f"{f.name}::{node.name}"
        for f in files
        for node in ast.parse(f.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
    }


def _covered(units: list[str]) -> list[str]:
    """The tests ``units`` run (a file unit stands for all of its tests), with repeats kept."""
    out: list[str] = []
    for unit in units:
        out += [unit] if "::" in unit else sorted(t for t in _tests(FILES) if t.startswith(f"{unit}::"))
    return out


def test_every_test_of_the_suite_runs_once_across_the_shares() -> None:
    shares = split_tests(FILES, 2)
    assert len(shares) == 2 and all(shares)
    ran = _covered([u for share in shares for u in share])
    assert sorted(ran) == sorted(_tests(FILES))  # each exactly once


def test_the_weighted_units_name_tests_and_files_that_exist() -> None:
    """A renamed test must not leave a stale weight (the split would then put the heavy tests together)."""
    names = _tests(FILES) | {f.name for f in FILES}
    assert set(ENGINE_WEIGHTS) <= names, set(ENGINE_WEIGHTS) - names
    assert set(ENGINE_WEIGHTS) <= set(suite_units(FILES))


def test_the_three_attention_tests_are_not_all_in_one_share() -> None:
    heavy = {u for u in ENGINE_WEIGHTS if u.startswith("test_attention.py::")}
    shares = split_tests(FILES, 2)
    assert all(heavy - set(share) for share in shares), shares


def test_only_a_suite_reading_an_engine_is_split() -> None:
    from crossattn_sizing.runs.verify_run import VerifyPlan, runs_engine
    from crossattn_sizing.specs.resolve import Isolation

    def plan(impl: str) -> VerifyPlan:
        return VerifyPlan(specs=[], subjects={}, impl=impl, device="cpu", profile="ci", max_examples=None,
                          seed=None, select=[], jobs=2, isolation=Isolation(True, None))  # fmt: skip

    assert runs_engine(plan("torch"), "vllm@/some/tree")
    assert runs_engine(plan("vllm@/some/tree"), "mrv2")
    assert not runs_engine(plan("torch"), "mrv2")


def _verdicts(tree: Path, jobs: int, folder: Path, env: dict[str, str]) -> dict[str, tuple[object, ...]]:
    """Per property of verify ``--jobs jobs`` on ``tree``: its outcome, examples and failing example."""
    out = folder / f"jobs{jobs}.json"
    command = [sys.executable, "-m", "crossattn_sizing", "verify", "--engine", f"vllm@{tree}",
               "--jobs", str(jobs), "-k", "(test_capacity or test_admission) and not prove",
               "--json", str(out)]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    report = json.loads(out.read_text())
    return {
        p["name"]: (p["outcome"], p["examples"], p["falsifying_example"])
        for policy in report["policies"]
        for p in policy["properties"]
    }


@pytest.mark.slow
def test_two_processes_give_the_verdicts_of_one(tmp_path: Path) -> None:
    """The 0.24.0 tree fails its capacity property whether one process or two judge it."""
    tree = build_tree(tmp_path / "checkout", "0.24.0", kernels=True)
    env = dict(os.environ, CROSSATTN_ENGINE_CACHE=str(tmp_path / "engine-cache"),
               XDG_CACHE_HOME=str(tmp_path / "xdg"), CROSSATTN_OFFLINE="1")  # fmt: skip
    one = _verdicts(tree, 1, tmp_path, env)
    two = _verdicts(tree, 2, tmp_path, env)
    assert one == two
    assert one["test_capacity::test_coverage"][0] == "fails"
    assert any(v[0] == "holds" for v in one.values())


def test_each_step_is_one_launch_with_every_request_of_the_batch(tmp_path: Path) -> None:
    """A three-request batch costs one slot mapping, one KV write and one attention call per step (C = 1),
    not one per request: a prefill step and a decode step of self-attention, then a cross-attention step."""
    import torch

    from crossattn_sizing.core import known_configs
    from crossattn_sizing.core.policies import BUILTIN_POLICIES, checked_widths
    from properties.impl_scenarios import run_cross, run_self
    from properties.impl_strategies import AttentionShape, CrossCase, SelfCase
    from tests.test_engine_kernels import _impl

    impl, worker = _impl(tmp_path / "tree", kernels=True)
    try:
        mrv2 = BUILTIN_POLICIES["mrv2"]
        config = known_configs.nemotron_parse().replace(max_num_reqs=3)
        widths = checked_widths(mrv2, config)
        shape = AttentionShape(num_heads=1, head_dim=4, dtype=torch.float32)
        before = impl.calls.copy()
        run_self(impl, mrv2, config, widths, SelfCase((2, 0, 1), (5, 17, 3), (True, True, False)), shape,
                 seed=1, pool_seed=2, guarded=True)  # fmt: skip
        ran = impl.calls - before
        assert (ran["slots"], ran["write_kv"], ran["paged_attention"]) == (2, 2, 2), ran
        before = impl.calls.copy()
        run_cross(impl, mrv2, config, widths, CrossCase((1, 2, 0), (40, 3, 17), (1, 2, 1)), shape, seed=3,
                  pool_seed=4, guarded=False, mode="unsharded")  # fmt: skip
        ran = impl.calls - before
        assert (ran["slots"], ran["write_kv"], ran["paged_attention"]) == (1, 1, 1), ran
    finally:
        worker.close()
