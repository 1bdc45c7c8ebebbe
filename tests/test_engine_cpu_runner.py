"""0.34's second copy of the sizing rule: ``StandaloneCPUModelRunner.initialize_kv_cache``, executed.

vLLM 0.34.0 keeps the three-way max (``max(M, encoder budget, S)``) twice: in
the GPU runner (ModelRunner V2) and in ``vllm/v1/worker/cpu/standalone_model_runner.py``,
whose class does not inherit it. The sizing executor runs either copy by its
runner key (``crossattn_sizing.engine.vllm.sizing_exec.EXECUTED_RUNNERS``), and the
audit reports each on its own row. Here the recorded 0.34.0 file
(tests/fixtures/vllm/0.34.0/) runs with stand-ins for the four names it reads
before the end of its loop; the release's own spec arithmetic runs on the real
wheel (tests/test_engine_real.py, ``nox -s engine``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from crossattn_sizing.audit.executed import ExecutedPolicy
from crossattn_sizing.audit.modules import ModuleIndex
from crossattn_sizing.audit.verdicts import Outcome, audit_runner, sweep_configs
from crossattn_sizing.base.intmath import cdiv
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.engine.vllm.sizing_exec import (
    EXECUTED_RUNNERS,
    SizingExecError,
    load_sizing_source,
    run_sizing,
)
from crossattn_sizing.releases.sources import open_dir
from tests.engine_tree import FIXTURES
from tests.test_engine_fixture import NEMOTRON

PATH, CLASS = EXECUTED_RUNNERS["cpu"]
SOURCE = (FIXTURES / "0.34.0" / "standalone_model_runner.py").read_text()
BUDGET_LINE = "                self.scheduler_config.max_num_encoder_input_tokens,\n"
"""The encoder budget's term of the three-way max; the meta-test deletes it (the pre-0.25 rule)."""


@dataclass(frozen=True)
class _Spec:
    """An attention spec as the loop reads it: one row entry per block of the length it is asked about."""

    block_size: int
    uses_slot_mapping: bool = True
    block_table_token_alignment: int = 1

    def max_num_blocks_per_req(self, vllm_config: object, max_model_len: int) -> int:
        return cdiv(max_model_len, self.block_size)


class _Uniform:
    """``UniformTypeKVCacheSpecs``: no group here is one."""


class _Window:
    """``SlidingWindowSpec``: no group here is one."""


def _resolve(module: str, attr: str, name: str) -> object:
    stand_ins = {
        "deepcopy": copy.deepcopy, "UniformTypeKVCacheSpecs": _Uniform, "SlidingWindowSpec": _Window,
        "get_block_table_width": lambda blocks, block_size, token_alignment=1: blocks,
    }  # fmt: skip
    if name not in stand_ins:
        raise AssertionError(f"the CPU runner's sizing asked for {module}.{attr} as {name}")
    return stand_ins[name]


def _runner(cfg: RunnerConfig) -> SimpleNamespace:
    hf = SimpleNamespace(**({} if cfg.max_source_positions is None else
                            {"max_source_positions": cfg.max_source_positions}))  # fmt: skip
    return SimpleNamespace(
        max_model_len=cfg.max_model_len, is_encoder_decoder=cfg.is_encoder_decoder, vllm_config=None,
        model_config=SimpleNamespace(hf_config=hf),
        scheduler_config=SimpleNamespace(max_num_encoder_input_tokens=cfg.encoder_budget),
    )  # fmt: skip


class _FixturePolicy:
    """The recorded CPU runner's executed sizing as the audit's executed policy sees a release's."""

    version = "0.34.0"
    runner = "cpu"

    def __init__(self, source: str) -> None:
        self.source = load_sizing_source(source, PATH, CLASS)

    def __call__(self, cfg: RunnerConfig) -> tuple[int, ...]:
        groups = [SimpleNamespace(kv_cache_spec=_Spec(g.block_size)) for g in cfg.groups]
        out = run_sizing(self.source, _runner(cfg), SimpleNamespace(kv_cache_groups=groups), _resolve)
        return tuple(out["max_num_blocks_per_group"])


def test_the_cpu_runner_is_its_own_copy_of_the_sizing() -> None:
    source = load_sizing_source(SOURCE, PATH, CLASS)
    assert set(source.global_names) == {"deepcopy", "UniformTypeKVCacheSpecs", "SlidingWindowSpec",
                                        "get_block_table_width"}  # fmt: skip
    assert "init_attn_backend" not in source.global_names  # nothing after the loop runs
    with pytest.raises(SizingExecError, match="no class GPUModelRunner"):
        load_sizing_source(SOURCE, PATH)  # the CPU file has no GPU runner: the key picks the class


@pytest.mark.parametrize(("source_positions", "width"), [(None, 209), (4096, 256)])
def test_the_three_way_max_runs_in_the_cpu_runner(source_positions: int | None, width: int) -> None:
    """Nemotron-Parse's 3329 encoder tokens (209 blocks of 16) over M = 2048; S = 4096 wins when set."""
    cfg = RunnerConfig(
        2048, 4096, NEMOTRON.groups, max_num_encoder_input_tokens=3329, max_num_reqs=4,
        max_source_positions=source_positions,
    )  # fmt: skip
    assert _FixturePolicy(SOURCE)(cfg) == (width, width)


def _audit(tmp_path: Path, source: str) -> object:
    """The audit's CPU-runner row with the fixture's executed sizing (a tree holding the recorded file)."""
    target = tmp_path / "vllm" / "v1" / "worker" / "cpu" / "standalone_model_runner.py"
    target.parent.mkdir(parents=True)
    target.write_text(source)
    index = ModuleIndex(open_dir(tmp_path))
    return audit_runner(index, "cpu", "0.34.0", sweep_configs()[:200], ExecutedPolicy(_FixturePolicy(source)))


def test_the_audit_reports_the_cpu_runner_executed(tmp_path: Path) -> None:
    verdict = _audit(tmp_path, SOURCE)
    assert verdict.outcome is Outcome.HOLDS, verdict
    assert verdict.title == "StandaloneCPUModelRunner" and verdict.path == "executed"
    assert verdict.where == f"executed: {PATH} {CLASS}.initialize_kv_cache (vLLM 0.34.0)"
    assert verdict.nemotron["holds"] and verdict.configs_checked == 200 and verdict.configs_failing == 0


def test_a_cpu_runner_without_the_encoder_budget_fails_the_audit(tmp_path: Path) -> None:
    """Meta-test: the recorded file with the budget's term deleted (one line) sizes max(M, S) and fails
    on a swept config whose encoder budget exceeds both."""
    assert SOURCE.count(BUDGET_LINE) == 1
    verdict = _audit(tmp_path, SOURCE.replace(BUDGET_LINE, ""))
    assert verdict.outcome is Outcome.FAILS, verdict
    bad = verdict.counterexample.config
    assert bad.encoder_budget > max(bad.max_model_len, bad.max_source_positions or 0), bad.describe()


def test_a_release_without_the_cpu_runner_is_absent_not_a_failed_execution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``audit --engine vllm@TREE --runner v2 --runner cpu`` on a 0.25.0 tree: V2 executed and holding, the
    CPU row absent, and no worker asked to run a file the tree does not have."""
    import json
    import subprocess
    import sys

    from tests.engine_tree import build_tree

    monkeypatch.setenv("CROSSATTN_ENGINE_CACHE", str(tmp_path / "engine-cache"))
    monkeypatch.setenv("CROSSATTN_OFFLINE", "1")
    tree = build_tree(tmp_path / "checkout", "0.25.0")
    report = tmp_path / "audit.json"
    proc = subprocess.run(
        [sys.executable, "-m", "crossattn_sizing", "audit", "--engine", f"vllm@{tree}", "--runner", "v2",
         "--runner", "cpu", "--json", str(report), "--markdown", str(tmp_path / "audit.md")],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = report.read_text()
    assert "no StandaloneCPUModelRunner in this release" in text and "executing it failed" not in text
    assert json.loads(text) and '"path": "executed"' in text  # V2 ran the tree's own sizing
