"""``prove --symbolic``: proofs for all configs, models replayed by ``check``, and the meta-tests.

Each proof is computed once per module (the fixtures below) and shared by the
tests that read it: the verdict, the model's shape, and the agreement with the
bounded proof on a small grid.
"""

from __future__ import annotations

import functools
import shlex
import sys
from pathlib import Path

import pytest

pytest.importorskip("z3", reason="prove --symbolic needs z3-solver (the 'prove' and 'test' extras)")

from crossattn_sizing.audit.extract import RUNNERS, read_runner
from crossattn_sizing.audit.modules import ModuleIndex
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.commands.cli import main
from crossattn_sizing.core.capacity import violations
from crossattn_sizing.core.policies import BUILTIN_POLICIES, Policy
from crossattn_sizing.prove import Domain, prove_all
from crossattn_sizing.releases.sources import open_dir
from crossattn_sizing.symbolic.builtin import builtin_paths
from crossattn_sizing.symbolic.engine import runner_paths
from crossattn_sizing.symbolic.run import SymbolicResult, prove_symbolic
from crossattn_sizing.symbolic.terms import Z3_MISSING
from tests.symbolic_trees import RUNNER_FILES, read_tree

HOLDING = ("mrv2", "mrv2-pow2", "mrv2-noalign", "v1")
PREFIX = tuple(name for name, p in BUILTIN_POLICIES.items() if p.length == "prefix")
SIZING_LINE = "block_table_max_model_len, spec.block_size * self.dcp_size"


@functools.cache
def builtin_result(name: str) -> SymbolicResult:
    policy = BUILTIN_POLICIES[name]
    return prove_symbolic(name, policy, lambda enc, cfg: builtin_paths(enc, cfg, policy))


def tree_result(
    root: Path, version: str, replace: dict[str, str] | None = None
) -> tuple[SymbolicResult, Policy]:
    index = ModuleIndex(open_dir(read_tree(root, version, replace)))
    concrete = read_runner(index, "v2")  # the release's own code over integers: check's concrete answer here
    return prove_symbolic(f"vllm {version}", concrete, runner_paths(index, RUNNERS["v2"])), concrete


@pytest.fixture(scope="module")
def vllm_results(tmp_path_factory) -> dict[str, tuple[SymbolicResult, Policy]]:
    return {v: tree_result(tmp_path_factory.mktemp(v), v) for v in ("0.24.0", "0.25.0")}


def runner_source(version: str) -> str:
    return RUNNER_FILES[version]["v1/worker/gpu/model_runner.py"].read_text()


@pytest.mark.parametrize("name", HOLDING)
def test_builtin_policy_is_proved_for_all_configs(name):
    result = builtin_result(name)
    assert result.outcome is Outcome.HOLDS, result.detail
    assert result.detail.startswith("proved for all configs (4 shapes")


@pytest.mark.parametrize("name", PREFIX)
def test_prefix_policy_model_is_replayed_by_check_as_a_failure(name):
    result = builtin_result(name)
    assert result.outcome is Outcome.FAILS, result.detail
    assert result.config is not None and result.encoder_len is not None
    found = violations(BUILTIN_POLICIES[name], result.config, [result.encoder_len])
    assert [v.explain() for v in found] == list(result.shortfalls) != []
    assert f"--encoder-len {result.encoder_len}" in result.replay_line


def test_a_model_the_concrete_code_holds_on_is_not_run_with_both_results():
    """Meta-test of the replay: the symbolic side of mrv2-prefix against mrv2's concrete code."""
    prefix = BUILTIN_POLICIES["mrv2-prefix"]
    result = prove_symbolic("mrv2-prefix", BUILTIN_POLICIES["mrv2"],
                            lambda enc, cfg: builtin_paths(enc, cfg, prefix))  # fmt: skip
    assert result.outcome is Outcome.NOT_RUN
    assert "falls short symbolically, but check holds on it (concrete widths (" in result.detail
    assert result.config is not None and result.config.describe() in result.detail
    assert not result.proved


@pytest.mark.slow  # shares the module's two tree proofs (about 4 CPU s together); seconds more on a loaded CI
def test_vllm_0_25_is_proved_for_all_configs(vllm_results):
    result, _ = vllm_results["0.25.0"]
    assert result.outcome is Outcome.HOLDS, result.detail
    assert result.paths >= 4  # the release's `spec.block_size <= 128` splits every shape


def test_vllm_0_24_model_is_nemotron_shaped_or_smaller_and_replayed(vllm_results):
    result, concrete = vllm_results["0.24.0"]
    assert result.outcome is Outcome.FAILS, result.detail
    config, e = result.config, result.encoder_len
    assert config is not None and e is not None
    # Nemotron-Parse: M = 2048, 3329 encoder tokens, bs = 16, C = 1 (docs/spec.md, Known bug shapes).
    assert config.max_model_len <= 2048 and e <= 3329 and config.dcp_size == 1
    assert all(g.block_size == 16 for g in config.groups)
    assert violations(concrete, config, [e])
    assert "`spec.block_size <= 128` is True" in result.detail


def test_one_term_changed_in_a_sizing_line_gets_a_model(tmp_path):
    """Meta-test: 0.25.0's sizing line off by one (``L - 1`` tokens sized for) gets a model check fails."""
    source = runner_source("0.25.0")
    assert source.count(SIZING_LINE) == 1
    broken = source.replace(SIZING_LINE, SIZING_LINE.replace("len,", "len - 1,"))
    result, concrete = tree_result(tmp_path, "0.25.0", {"v1/worker/gpu/model_runner.py": broken})
    assert result.outcome is Outcome.FAILS, result.detail
    assert result.config is not None and result.encoder_len is not None
    assert violations(concrete, result.config, [result.encoder_len])


def test_code_the_evaluator_cannot_read_is_not_run_naming_the_line(tmp_path):
    source = runner_source("0.25.0")
    broken = source.replace("max_num_blocks = cdiv(", "max_num_blocks = mystery(", 1)
    assert broken != source
    result, _ = tree_result(tmp_path, "0.25.0", {"v1/worker/gpu/model_runner.py": broken})
    assert result.outcome is Outcome.NOT_RUN
    line = next(n for n, text in enumerate(broken.splitlines(), 1) if "mystery(" in text)
    assert f"vllm/v1/worker/gpu/model_runner.py:{line}" in result.detail
    assert "mystery" in result.detail


SMALL_GRID = {
    "block_sizes": "16,128,256", "kernel_block_sizes": "all", "dcp_sizes": "1,2",
    "max_model_lens": "1,64,448,2048", "encoder_budgets": "1,129,1500,3329",
    "source_positions": "absent,0,1500",
}  # fmt: skip


TREE_GRID = SMALL_GRID | {"kernel_block_sizes": "16,128,256", "dcp_sizes": "1"}
"""A release read per config costs milliseconds: kbs = bs and no DCP keep its grid to 144 configs."""


def agree(result: SymbolicResult, policy: Policy, grid_options: dict[str, str] = SMALL_GRID) -> None:
    """Proved goes with bounded "holds"; a model with bounded "fails" or lies outside the grid."""
    grid = Domain.parse(**grid_options)
    bounded = prove_all([grid], policy, examples=1)
    if result.proved:
        assert bounded.holds, bounded.counterexamples
        return
    assert result.outcome is Outcome.FAILS, result.detail
    if bounded.holds:  # the model must lie outside the grid, and say where
        config = result.config
        assert config is not None
        inside = (str(config.groups[0].block_size) in grid_options["block_sizes"].split(",")
                  and str(config.max_model_len) in grid_options["max_model_lens"].split(","))  # fmt: skip
        assert not inside


@pytest.mark.parametrize("name", list(BUILTIN_POLICIES))
def test_symbolic_agrees_with_the_bounded_proof_on_builtin_policies(name):
    agree(builtin_result(name), BUILTIN_POLICIES[name])


@pytest.mark.slow  # the bounded side reads the release once per config of a 144-config grid
@pytest.mark.parametrize("version", ["0.24.0", "0.25.0"])
def test_symbolic_agrees_with_the_bounded_proof_on_recorded_trees(vllm_results, version):
    result, concrete = vllm_results[version]
    agree(result, concrete, TREE_GRID)


def test_cli_proves_and_replays(capsys, tmp_path):
    assert main(["prove", "--policy", "mrv2-prefix-noalign", "--symbolic"]) == 1
    out = capsys.readouterr().out
    assert "FAILS: the solver's model" in out and "check: FAIL  coverage" in out
    replay = next(line for line in out.splitlines() if line.strip().startswith("replay: "))
    command = replay.split("replay: crossattn-sizing ", 1)[1]
    assert main(shlex.split(command)) == 1  # check itself fails on the model


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--policy", "tests.nowhere:policy"], "a module:attr policy has no symbolic form"),
        (["--policy", "mrv2", "--block-size", "16"], "--block-size '16': is an option of the bounded proof"),
        (["--policy", "mrv2", "--dry-run"], "--dry-run"),
        (["--policy", "nosuch"], "prove --symbolic takes a built-in policy, vllm==X or vllm@PATH"),
    ],
)
def test_cli_refuses_in_one_line(capsys, argv, said):
    assert main(["prove", "--symbolic", *argv]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1


def test_missing_z3_is_one_line(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "z3", None)  # import z3 raises ImportError
    assert main(["prove", "--policy", "mrv2", "--symbolic"]) == 2
    err = capsys.readouterr().err
    assert Z3_MISSING in err and len(err.strip().splitlines()) == 1


def test_audit_column_shows_the_v2_proof(tmp_path, monkeypatch):
    from crossattn_sizing.audit.verdicts import RunnerVerdict
    from crossattn_sizing.commands.audit_report import symbolic_cell
    from crossattn_sizing.symbolic.release import NO_Z3, v2_symbolic

    index = ModuleIndex(open_dir(read_tree(tmp_path, "0.24.0")))
    proof = v2_symbolic(index, "0.24.0", None)
    assert proof["verdict"] == "fails" and proof["model"]["max_model_len"] <= 2048
    verdict = RunnerVerdict("0.24.0", "v2", "ModelRunner V2", Outcome.FAILS, symbolic=proof)
    assert symbolic_cell(verdict).startswith("[red]fails[/]\nM=")
    assert verdict.to_dict()["symbolic"] == proof
    monkeypatch.setitem(sys.modules, "z3", None)
    assert v2_symbolic(index, "0.24.0", None)["detail"] == NO_Z3
