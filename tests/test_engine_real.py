"""The expected verdicts on vLLM's real code, release by release (``nox -s engine``; needs the wheels).

Each release runs in its own worker: the installed vllm if its version
matches, else the release wheel unpacked into the engine cache (downloaded
once into the wheel cache unless ``CROSSATTN_OFFLINE=1``). The fast twins of
these tests, on recorded sources, are in tests/test_engine_fixture.py.

Releases past 0.25.0 checked for "holds": ``CROSSATTN_ENGINE_RELEASES``
(comma-separated, default ``0.25.0,0.34.0``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

if os.environ.get("CROSSATTN_ENGINE_TESTS") != "1":
    pytest.skip(
        "real vLLM wheels (hundreds of MB): run by `nox -s engine` (CROSSATTN_ENGINE_TESTS=1)",
        allow_module_level=True,
    )

from crossattn_sizing.core import capacity
from crossattn_sizing.core.config import KVCacheGroup, RunnerConfig
from crossattn_sizing.core.policies import BUILTIN_POLICIES, alignment_multiple
from crossattn_sizing.engine.install import resolve_release
from crossattn_sizing.engine.vllm.adapters import INTERPRETER_REFUSALS, VllmImpl, VllmPolicy, run_block_tables
from crossattn_sizing.engine.vllm.coverage import engine_coverage
from crossattn_sizing.engine.vllm.kernels import BACKEND
from crossattn_sizing.prove import prove_all
from crossattn_sizing.prove.edges import edge_domain
from tests.meta.test_meta_capacity import shrunk_counterexample
from tests.vllm_test_values import SLOT_CASES, TABLE_CASES, SlotCase, TableCase

pytestmark = pytest.mark.engine

RELEASES = os.environ.get("CROSSATTN_ENGINE_RELEASES", "0.25.0,0.34.0")
FIXED = [v.strip() for v in RELEASES.split(",") if v.strip()]
NEMOTRON = RunnerConfig(
    2048, 4096, (KVCacheGroup("full", 16), KVCacheGroup("cross", 16)),
    max_num_encoder_input_tokens=3329, max_num_reqs=4,
)  # fmt: skip


def test_024_sizing_fails_coverage_with_the_nemotron_shape() -> None:
    policy = VllmPolicy("vllm==0.24.0")
    assert not policy.expected_to_hold
    (v,) = [v for v in capacity.violations(policy, NEMOTRON, [3329], ("coverage",)) if v.kind == "cross"]
    assert (v.needed, v.given, v.first_uncovered_token) == (209, 128, 2048)


def test_024_coverage_property_finds_the_nemotron_shape() -> None:
    case = shrunk_counterexample(VllmPolicy("vllm==0.24.0"), "coverage")
    assert case is not None, "coverage did not catch vLLM 0.24.0's own sizing within the ci budget"
    assert case.config.max_source_positions is None and max(case.encoder_lens) > case.config.max_model_len


def test_024_block_tables_map_positions_into_the_next_request() -> None:
    result = engine_coverage(VllmPolicy("vllm==0.24.0"), NEMOTRON, [3329, 100], first_row=0)
    assert not result.holds
    assert "209 entries appended to a row of 128" in result.problems[0]
    assert "first position 2048" in result.problems[1]


def test_024_kernel_reads_past_the_last_row() -> None:
    """In the last row the 81 surplus ids and their reads land past the tensor: wrong slots or a crash."""
    result = engine_coverage(VllmPolicy("vllm==0.24.0"), NEMOTRON, [3329])
    assert not result.holds
    assert result.crashed or "209 entries appended to a row of 128" in result.problems[0], result.problems


@pytest.mark.parametrize("version", FIXED)
def test_fixed_release_holds(version: str) -> None:
    policy = VllmPolicy(f"vllm=={version}")
    assert policy.expected_to_hold
    assert capacity.violations(policy, NEMOTRON, [3329]) == []
    assert engine_coverage(policy, NEMOTRON, [3329, 100], first_row=0).holds
    assert engine_coverage(policy, NEMOTRON, [3329]).holds
    for invariant in ("coverage", "allocation"):
        assert shrunk_counterexample(policy, invariant) is None, f"{version}: {invariant}"


@pytest.mark.parametrize(("version", "model"), [("0.24.0", "mrv2-prefix"), ("0.25.0", "mrv2-pow2")])
def test_prove_on_edge_parts_gives_the_verdict_of_the_releases_model(version: str, model: str) -> None:
    """Two parts of the edge domain (~200,000 configs) through ``widths_many``: the model's exact failures."""
    parts = edge_domain(block_sizes=(48, 256), dcp_sizes=(2,))
    executed = prove_all(parts, VllmPolicy(f"vllm=={version}"), examples=3)
    modelled = prove_all(parts, BUILTIN_POLICIES[model], examples=3)
    assert executed.batched and executed.configs == sum(p.size for p in parts)
    assert (executed.failures, executed.counterexamples) == (modelled.failures, modelled.counterexamples)
    assert executed.holds is (version == "0.25.0")


class _Shrunk:
    """The real 0.25.0 widths less one alignment multiple (``128 // bs`` blocks for bs <= 128), per group."""

    name = "vllm==0.25.0 shrunk by one alignment multiple"

    def __init__(self, policy: VllmPolicy) -> None:
        self.policy = policy

    def blocks(self, config: RunnerConfig) -> list[int]:
        real = self.policy.sizing(config)["blocks"]
        return [max(b - alignment_multiple(g.block_size, "pow2"), 0) for b, g in zip(real, config.groups,
                                                                                   strict=True)]  # fmt: skip

    def __call__(self, config: RunnerConfig) -> tuple[int, ...]:
        return tuple(b * g.bpk for b, g in zip(self.blocks(config), config.groups, strict=True))


def test_shrunk_025_widths_are_caught_by_the_coverage_property(monkeypatch: pytest.MonkeyPatch) -> None:
    shrunk = _Shrunk(VllmPolicy("vllm==0.25.0"))
    assert shrunk_counterexample(shrunk, "coverage") is not None
    real, blocks = shrunk.policy.sizing(NEMOTRON), shrunk.blocks(NEMOTRON)
    # The release's block tables, given rows as long as the shrunk sizing says.
    monkeypatch.setattr(shrunk.policy, "sizing", lambda config: {**real, "blocks": blocks})
    result = engine_coverage(shrunk.policy, NEMOTRON, [3329, 100], first_row=0)
    assert not result.holds and "appended to a row of 208" in result.problems[0]


@pytest.mark.parametrize("version", ["0.24.0", "0.25.0"])
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_real_kernel_passes_the_slot_property(version: str, data: st.DataObject) -> None:
    from properties.test_slot_mapping import check_slot_mapping

    check_slot_mapping(data, VllmImpl(f"vllm=={version}"))


# The release's own kernels as --impl (KV write, attention, merge) -----------------------

KERNELS = settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck), database=None,
                   derandomize=True, phases=[Phase.explicit, Phase.generate])  # fmt: skip
"""Interpreted kernels take seconds per attention example: five per property, no shrinking."""


@pytest.mark.parametrize("version", FIXED)
def test_every_step_runs_the_releases_own_kernel(version: str) -> None:
    impl = VllmImpl(f"vllm=={version}")
    assert impl.stand_ins == {}, impl.provenance
    assert all(name.startswith("vllm.") for name in impl.provenance.values()), impl.provenance


@pytest.mark.parametrize("version", FIXED)
@pytest.mark.parametrize("kind", ["cross-guarded", "cross-unguarded", "self", "self-dcp"])
def test_release_kernels_pass_the_attention_properties(version: str, kind: str) -> None:
    from properties.impl_strategies import correctable_dcp
    from properties.test_attention import check_cross_attention, check_self_attention

    if kind == "self-dcp" and _since_034(version):
        pytest.skip(f"{version}'s DCP slot mapping: {INTERPRETER_REFUSALS['mask has unsupported dtype']} "
                    "(its DCP correction is checked on its own: test_release_dcp_merge_is_the_harness_merge)")
    impl = VllmImpl(f"vllm=={version}")
    mrv2 = BUILTIN_POLICIES["mrv2"]
    # DCP 2 or 4: sizes the release's correction kernel takes, so its cp_lse_ag_out_ar combines the ranks.
    dcp = correctable_dcp() if kind == "self-dcp" else {}

    @KERNELS
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        if kind.startswith("self"):
            check_self_attention(data, impl, mrv2, **dcp)
        else:
            check_cross_attention(data, impl, mrv2, kind == "cross-guarded")

    run()
    # Held on the release's kernels, not on examples that never reached them (bf16 and, on 0.34, DCP
    # slot mapping are not run on CPU: Triton's interpreter).
    assert impl.calls["write_kv"] >= 2 and impl.calls["paged_attention"] >= 2, impl.calls
    if kind == "self-dcp":
        assert impl.calls[impl.provenance["merge"]] >= 1, impl.calls
        assert impl.calls[str(impl.decode_kernel)] >= 1, impl.calls  # the stand-in DCP needs
    else:  # C = 1 draws run the release's Triton backend
        assert impl.calls[BACKEND] >= 1, impl.calls


def _since_034(version: str) -> bool:
    return tuple(int(p) for p in version.split(".")[:2]) >= (0, 34)


@pytest.mark.parametrize("version", FIXED)
@pytest.mark.parametrize(("ranks", "head_dim"), [(2, 8), (4, 64), (3, 8), (2, 3)])
def test_release_dcp_merge_is_the_harness_merge(version: str, ranks: int, head_dim: int) -> None:
    """The release's ``cp_lse_ag_out_ar`` (powers of two) or ``merge_attn_states`` (other shapes)."""
    from crossattn_sizing.impl.attention import lse_merge

    impl = VllmImpl(f"vllm=={version}")
    gen = torch.Generator().manual_seed(ranks * head_dim)
    outs = [torch.randn(5, 2, head_dim, generator=gen) for _ in range(ranks)]
    lses = [torch.randn(5, 2, generator=gen) * 4 for _ in range(ranks)]
    lses[0][1, 1] = float("-inf")  # a rank that holds none of this query's keys
    torch.testing.assert_close(impl.merge(outs=outs, lses=lses), lse_merge(outs=outs, lses=lses))
    pow2 = ranks & (ranks - 1) == 0 and head_dim & (head_dim - 1) == 0
    assert impl.calls[impl.provenance["merge"]] == pow2, impl.calls


# vllm@PATH on the unpacked 0.25.0 wheel, and a copy of it with one kernel line changed --------


def _tree(version: str = "0.25.0") -> Path:
    """The unpacked release, a folder holding ``vllm/`` as a contributor's checkout does."""
    return Path(resolve_release(f"vllm=={version}").paths[0])


def _broken_copy(tree: Path, dest: Path, step: str) -> Path:
    """``tree`` mirrored by symlinks (no 1 GB copy), with the one kernel file of ``step`` changed."""
    from tests.test_engine_kernels import BROKEN

    name, line, changed = BROKEN[step]
    shutil.copytree(tree / "vllm", dest / "vllm", copy_function=os.symlink)
    kernel = dest / "vllm" / "v1" / "attention" / "ops" / name
    text = kernel.read_text()
    assert line in text, f"{name} of the release no longer has the line the meta-test changes"
    kernel.unlink()
    kernel.write_text(text.replace(line, changed, 1))
    return dest


def test_an_unpacked_wheel_as_a_tree_holds_and_reproduces() -> None:
    from properties.test_attention import check_cross_attention

    tree = _tree()
    impl = VllmImpl(f"vllm@{tree}")
    assert impl.stand_ins == {} and impl.worker.release.label == f"vllm@{tree}"

    @KERNELS
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        check_cross_attention(data, impl, BUILTIN_POLICIES["mrv2"], False)

    run()
    assert impl.calls["paged_attention"] >= 2, impl.calls
    proc = subprocess.run(
        [sys.executable, "-m", "crossattn_sizing", "reproduce", "nemotron-parse", "--engine", f"vllm@{tree}"],
        capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(all four steps vLLM's kernels)" in proc.stdout


@pytest.mark.parametrize("step", ["write_kv", "backend", "paged_attention", "merge"])
def test_a_tree_with_one_kernel_line_changed_is_caught(tmp_path: Path, step: str) -> None:
    """``backend``: one line of ``unified_attention`` (what the Triton backend runs at C = 1)."""
    from properties.impl_strategies import correctable_dcp
    from properties.test_attention import check_self_attention
    from tests.test_engine_kernels import DCP_STEPS

    broken = VllmImpl(f"vllm@{_broken_copy(_tree(), tmp_path, step)}")
    dcp = correctable_dcp() if step in DCP_STEPS else {}

    @KERNELS
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        check_self_attention(data, broken, BUILTIN_POLICIES["mrv2"], **dcp)

    with pytest.raises(AssertionError, match=r"differs from dense attention|non-finite"):
        run()


def _gloo(impl: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "properties/test_distributed_dcp.py", "--impl", impl,
         "--dcp-backend", "gloo", "-p", "no:cacheprovider", "-q"],
        capture_output=True, text=True, check=False, timeout=1800, cwd=Path(__file__).resolve().parent.parent,
    )  # fmt: skip


def test_gloo_ranks_run_the_releases_kernels_and_a_changed_correction_is_caught(tmp_path: Path) -> None:
    """Over gloo each DCP rank is a process running the release (its own worker); the ranks' partials
    are combined by the release's cp_lse_ag_out_ar in every rank. A tree whose correction has one
    line changed fails there."""
    held = _gloo(f"vllm@{_tree()}")
    assert held.returncode == 0, held.stdout[-3000:] + held.stderr[-2000:]
    caught = _gloo(f"vllm@{_broken_copy(_tree(), tmp_path, 'merge')}")
    assert caught.returncode == 1, caught.stdout[-3000:] + caught.stderr[-2000:]
    assert "differs from dense attention" in caught.stdout and "raised on DCP rank" not in caught.stdout


# 0.34's second copy of the sizing rule: StandaloneCPUModelRunner ---------------------------


def test_034_cpu_runner_sizes_as_the_gpu_runner() -> None:
    """The CPU runner's own ``initialize_kv_cache`` (executed) gives V2's blocks on the Nemotron shape,
    with and without ``max_source_positions``, and a Whisper-like shape."""
    gpu, cpu = VllmPolicy("vllm==0.34.0"), VllmPolicy("vllm==0.34.0", runner="cpu")
    assert "StandaloneCPUModelRunner.initialize_kv_cache" in cpu.summary
    for cfg in (NEMOTRON, NEMOTRON.replace(max_source_positions=4096),
                RunnerConfig(448, 2048, (KVCacheGroup("full", 16), KVCacheGroup("cross", 16)),
                             max_num_encoder_input_tokens=1500, max_source_positions=1500)):  # fmt: skip
        assert cpu.sizing(cfg)["blocks"] == gpu.sizing(cfg)["blocks"], cfg.describe()


def test_audit_executes_both_runners_of_034(tmp_path: Path) -> None:
    report = tmp_path / "audit.json"
    proc = subprocess.run(
        [sys.executable, "-m", "crossattn_sizing", "audit", "--engine", "vllm==0.34.0",
         "--engine", "vllm==0.25.0", "--runner", "v2", "--runner", "cpu",
         "--json", str(report), "--markdown", str(tmp_path / "a.md")],
        capture_output=True, text=True, check=False, timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = report.read_text()
    assert "standalone_model_runner.py StandaloneCPUModelRunner.initialize_kv_cache (vLLM 0.34.0)" in text
    assert "no StandaloneCPUModelRunner in this release" in text  # 0.25.0: absent, said so


# vLLM's own hand-written values on the releases' BlockTables ------------------------------


@pytest.mark.parametrize("version", FIXED)
@pytest.mark.parametrize("case", SLOT_CASES, ids=[c.name for c in SLOT_CASES])
def test_release_block_tables_give_vllms_slots(version: str, case: SlotCase) -> None:
    policy = VllmPolicy(f"vllm=={version}")
    since_034 = _since_034(version)
    if case.bpk > 1 and since_034:
        pytest.skip(f"{version}'s BlockTables takes no kernel block sizes (rows hold the spec's block ids)")
    if case.dcp[0] > 1 and since_034:
        pytest.skip(f"{version}'s DCP slot mapping: {INTERPRETER_REFUSALS['mask has unsupported dtype']}")
    tokens = sum(len(p) for p in case.positions)
    result = run_block_tables(
        policy.worker, block_sizes=[case.block_size], kernel_block_sizes=[case.kernel_block_size],
        max_num_blocks_per_group=[case.width], max_num_reqs=len(case.rows), max_num_batched_tokens=tokens + 5,
        appends=[(r, [list(ids)]) for r, ids in enumerate(case.rows)],
        steps=[{"idx_mapping": list(range(len(case.rows))), "positions": [list(p) for p in case.positions]}],
        cp=(case.dcp[0], case.dcp[1], case.dcp[2]),
    )  # fmt: skip
    slots = result["steps"][0]["slots"][0]
    assert slots[case.first_checked : case.first_checked + len(case.expected)] == list(case.expected)


@pytest.mark.parametrize("version", FIXED)
@pytest.mark.parametrize("case", TABLE_CASES, ids=[c.name for c in TABLE_CASES])
def test_release_block_tables_hold_vllms_rows(version: str, case: TableCase) -> None:
    policy = VllmPolicy(f"vllm=={version}")
    result = run_block_tables(
        policy.worker, block_sizes=list(case.block_sizes), kernel_block_sizes=list(case.block_sizes),
        max_num_blocks_per_group=[case.width] * len(case.block_sizes), max_num_reqs=case.num_rows,
        max_num_batched_tokens=64, appends=[(r, [list(ids) for ids in per]) for r, per in case.appends],
        steps=[],
    )  # fmt: skip
    for g, rows in enumerate(case.rows):
        for r, ids in enumerate(rows):
            assert result["rows"][g][r][: len(ids)] == list(ids), (g, r)
            assert result["num_blocks"][g][r] == len(ids), (g, r)
