"""The engine adapter against recorded vLLM sources (tests/fixtures/vllm/): no wheel, no download.

These keep the adapter from rotting in the default run: the sizing executor on
the real ``initialize_kv_cache`` of 0.24.0 and 0.25.0, and the worker process
(protocol, CPU shims, crash containment) running the real ``BlockTables`` and
Triton kernels of 0.25.0 inside a minimal package (tests/engine_tree.py). The
same checks on installed wheels are tests/test_engine_real.py (``nox -s engine``).
"""

from __future__ import annotations

import copy
import itertools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossattn_sizing.base.errors import HarnessError, ReleaseUnavailable
from crossattn_sizing.base.intmath import cdiv
from crossattn_sizing.base.settings import ENGINE_WORKERS
from crossattn_sizing.core import capacity
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.core.config_tile import ConfigTile
from crossattn_sizing.core.policies import BUILTIN_POLICIES, checked_widths
from crossattn_sizing.engine.client import EngineCrash, EngineWorker, Inexpressible, parallel_workers
from crossattn_sizing.engine.install import Release, resolve_release
from crossattn_sizing.engine.vllm import adapters as engine_vllm
from crossattn_sizing.engine.vllm.adapters import VllmImpl, VllmPolicy
from crossattn_sizing.engine.vllm.coverage import engine_coverage
from crossattn_sizing.engine.vllm.sizing_exec import SizingExecError, load_sizing_source, run_sizing
from crossattn_sizing.prove import Domain, PolicyRaised, prove
from crossattn_sizing.prove.batches import PackedWidths, tile_configs
from crossattn_sizing.prove.verify_row import prove_property
from crossattn_sizing.specs.resolve import load_policy
from tests.engine_tree import FIXTURES, build_tree

NEMOTRON = RunnerConfig(
    2048, 4096, (KVCacheGroup("full", 16), KVCacheGroup("cross", 16)),
    max_num_encoder_input_tokens=3329, max_num_reqs=4,
)  # fmt: skip


# The sizing executor on the recorded model runners --------------------------------------


@dataclass(frozen=True)
class _Spec:
    """Stand-in for a KVCacheSpec: the sizing loop reads ``block_size`` and checks MambaSpec."""

    block_size: int
    num_speculative_blocks: int = 0


class _Mamba(_Spec):
    pass


def _resolve(module: str, attr: str, name: str) -> object:
    stand_ins = {"cdiv": cdiv, "MambaSpec": _Mamba, "deepcopy": copy.deepcopy}
    if name not in stand_ins:
        raise AssertionError(f"the sizing asked for {module}.{attr} as {name}")
    return stand_ins[name]


def _runner(cfg: RunnerConfig) -> SimpleNamespace:
    hf = SimpleNamespace(**({} if cfg.max_source_positions is None else
                            {"max_source_positions": cfg.max_source_positions}))  # fmt: skip
    return SimpleNamespace(
        max_model_len=cfg.max_model_len, is_encoder_decoder=cfg.is_encoder_decoder,
        model_config=SimpleNamespace(hf_config=hf), dcp_size=cfg.dcp_size,
        scheduler_config=SimpleNamespace(max_num_encoder_input_tokens=cfg.encoder_budget),
        cache_config=SimpleNamespace(enable_prefix_caching=cfg.prefix_caching),
    )  # fmt: skip


def _fixture_blocks(version: str, cfg: RunnerConfig) -> list[int]:
    source = load_sizing_source((FIXTURES / version / "model_runner.py").read_text())
    groups = [SimpleNamespace(kv_cache_spec=_Spec(g.block_size)) for g in cfg.groups]
    out = run_sizing(source, _runner(cfg), SimpleNamespace(kv_cache_groups=groups), _resolve)
    return out["max_num_blocks_per_group"]


def test_sizing_reads_only_what_precedes_the_end_of_its_loop() -> None:
    source = load_sizing_source((FIXTURES / "0.25.0" / "model_runner.py").read_text())
    assert set(source.global_names) == {"deepcopy", "cdiv", "MambaSpec"}
    assert "init_attn_backend" not in source.global_names  # the first call after the loop never runs
    assert source.loop_start < source.loop_end


@pytest.mark.parametrize(("version", "width"), [("0.24.0", 128), ("0.25.0", 216)])
def test_nemotron_shape_on_the_recorded_sizing(version: str, width: int) -> None:
    """0.24.0 sizes 2048 tokens (128 blocks) for 3329 encoder tokens (209 needed); 0.25.0 gives 216."""
    assert _fixture_blocks(version, NEMOTRON) == [width, width]


@pytest.mark.parametrize(("version", "policy"), [("0.24.0", "mrv2-prefix"), ("0.25.0", "mrv2-pow2")])
def test_recorded_sizing_equals_the_modelled_policy(version: str, policy: str) -> None:
    """On a grid of shapes the executed code and the harness's model of it agree (both directions checked)."""
    for m, e, s, bs, dcp_size in itertools.product(
        (448, 2048), (2048, 3329), (None, 1500, 4096), (16, 48, 256), (1, 2)
    ):
        cfg = RunnerConfig(
            m, max(m, e), (KVCacheGroup("full", bs), KVCacheGroup("cross", bs)),
            max_num_encoder_input_tokens=e, max_source_positions=s, dcp_size=dcp_size,
        )  # fmt: skip
        assert tuple(_fixture_blocks(version, cfg)) == BUILTIN_POLICIES[policy](cfg), cfg.describe()


def test_sizing_failure_names_the_engine_line() -> None:
    source = load_sizing_source((FIXTURES / "0.25.0" / "model_runner.py").read_text())
    runner = _runner(NEMOTRON)
    del runner.scheduler_config.max_num_encoder_input_tokens
    groups = SimpleNamespace(kv_cache_groups=[SimpleNamespace(kv_cache_spec=_Spec(16))])
    where = r"model_runner\.py:\d+: initialize_kv_cache raised AttributeError"
    with pytest.raises(SizingExecError, match=where):
        run_sizing(source, runner, groups, _resolve)


def test_a_runner_without_v2_is_refused() -> None:
    with pytest.raises(SizingExecError, match="no class GPUModelRunner"):
        load_sizing_source("class Other:\n    pass\n")


_CUT = """
class GPUModelRunner:
    def initialize_kv_cache(self, kv_cache_config):
        if self.early:
            return None
        block_sizes, max_num_blocks_per_group = [], []
        block_table_max_model_len = self.max_model_len
        for group in kv_cache_config.kv_cache_groups:
            block_sizes.append(group.block_size)
            max_num_blocks_per_group.append(-(-block_table_max_model_len // group.block_size))
        raise RuntimeError("the code after the sizing loop ran")
"""


def test_only_the_code_up_to_the_end_of_the_sizing_loop_runs() -> None:
    """The function is cut after its loop: what follows never runs; an early return is refused."""
    source = load_sizing_source(_CUT)
    groups = SimpleNamespace(kv_cache_groups=[SimpleNamespace(block_size=16)])
    out = run_sizing(source, SimpleNamespace(early=False, max_model_len=100), groups, _resolve)
    assert out == {"block_sizes": [16], "max_num_blocks_per_group": [7], "block_table_max_model_len": 100}
    with pytest.raises(SizingExecError, match=r":10: initialize_kv_cache returned before the end of its"):
        run_sizing(source, SimpleNamespace(early=True, max_model_len=100), groups, _resolve)


# The worker over the recorded package ---------------------------------------------------

KILLING_BLOCK_TABLE = (FIXTURES / "0.25.0" / "block_table.py").read_text() + (
    "\n\ndef _die(self, *args, **kwargs):\n    import os, signal\n"
    "    os.kill(os.getpid(), signal.SIGSEGV)\n\n\n"
    "BlockTables.compute_slot_mappings = _die\n"
)  # a stand-in that dies the way a kernel reading past its allocation can


def _worker(root: Path, version: str, **kw: object) -> EngineWorker:
    tree = build_tree(root / version, version, **kw)  # type: ignore[arg-type]
    return EngineWorker(Release(version, [str(tree)]))


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("vllm-tree")
    made = {v: _worker(root, v) for v in ("0.24.0", "0.25.0")}
    yield made
    for w in made.values():
        w.close()


def test_worker_reports_the_cpu_shims(workers: dict[str, EngineWorker]) -> None:
    ready = workers["0.25.0"].start()
    assert ready["version"] == "0.25.0"
    assert ready["shims"] == [
        "env:TRITON_INTERPRET=1", "env:CUDA_VISIBLE_DEVICES=", "importlib.metadata.version('vllm')",
        "buffer_utils.UvaBuffer", "torch_utils.PIN_MEMORY=False",
    ]  # fmt: skip  (the recorded package, like a checkout, has no distribution metadata)


def test_policy_from_the_worker_fails_and_holds_as_the_releases_do(workers: dict[str, EngineWorker]) -> None:
    old = VllmPolicy("vllm==0.24.0", worker=workers["0.24.0"])
    new = VllmPolicy("vllm==0.25.0", worker=workers["0.25.0"])
    assert old(NEMOTRON) == (128, 128) and new(NEMOTRON) == (216, 216)
    assert not old.expected_to_hold and new.expected_to_hold
    (v,) = [v for v in capacity.violations(old, NEMOTRON, [3329], ("coverage",)) if v.kind == "cross"]
    assert (v.needed, v.given, v.first_uncovered_token) == (209, 128, 2048)
    assert capacity.violations(new, NEMOTRON, [3329]) == []


def test_real_block_tables_spill_into_the_next_request(workers: dict[str, EngineWorker]) -> None:
    """0.24.0: the 209 ids overrun row 0; once row 1 is written, positions from 2048 map elsewhere."""
    result = engine_coverage(VllmPolicy("vllm==0.24.0", worker=workers["0.24.0"]), NEMOTRON, [3329, 100],
                             first_row=0)  # fmt: skip
    assert not result.holds and not result.crashed
    assert "209 entries appended to a row of 128" in result.problems[0]
    assert "first position 2048" in result.problems[1]
    fixed = engine_coverage(VllmPolicy("vllm==0.25.0", worker=workers["0.25.0"]), NEMOTRON, [3329, 100])
    assert fixed.holds, fixed.problems


def test_shrinking_the_fixed_widths_by_one_alignment_multiple_is_caught(
    workers: dict[str, EngineWorker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Meta-test on the recorded 0.25.0 BlockTables: one alignment step (8 blocks of 16) less is caught."""
    policy = VllmPolicy("vllm==0.25.0", worker=workers["0.25.0"])
    real = policy.sizing(NEMOTRON)
    assert engine_coverage(policy, NEMOTRON, [3329, 100], first_row=0).holds
    shrunk = [b - 128 // 16 for b in real["blocks"]]
    monkeypatch.setattr(policy, "sizing", lambda config: {**real, "blocks": shrunk})
    result = engine_coverage(policy, NEMOTRON, [3329, 100], first_row=0)
    assert not result.holds and "appended to a row of 208" in result.problems[0]


def test_the_engine_implementation_takes_the_call_keywords(workers: dict[str, EngineWorker]) -> None:
    """VllmImpl is composed (vLLM's slot mapping, the torch kernels for the rest) in the keyword form."""
    from crossattn_sizing.impl import keyword_call_problems

    assert keyword_call_problems(VllmImpl("vllm==0.25.0", worker=workers["0.25.0"])) == []


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_real_slot_mapping_kernel_passes_the_slot_property(
    data: st.DataObject, workers: dict[str, EngineWorker]
) -> None:
    """The recorded kernel as ``--impl``: the slot-mapping property (DCP ranks included) holds."""
    from properties.test_slot_mapping import check_slot_mapping

    check_slot_mapping(data, VllmImpl("vllm==0.25.0", worker=workers["0.25.0"]))


def test_a_worker_crash_fails_the_request_and_the_next_one_restarts(tmp_path: Path) -> None:
    worker = _worker(tmp_path, "0.25.0", block_table_source=KILLING_BLOCK_TABLE)
    try:
        impl = VllmImpl("vllm==0.25.0", worker=worker)
        policy = VllmPolicy("vllm==0.25.0", worker=worker)
        result = engine_coverage(policy, NEMOTRON, [100])  # the example fails, the run goes on
        assert result.crashed and "worker died (SIGSEGV) while running scenario" in result.problems[0]
        with pytest.raises(EngineCrash, match="SIGSEGV"):
            impl.slot_mapping(**_one_token_step())
        assert worker.proc is None  # the dead worker is forgotten ...
        assert policy(NEMOTRON.replace(max_model_len=448)) == (216, 216)  # ... and a fresh one answers
        assert worker.proc is not None and worker.proc.poll() is None
        assert impl.worker is worker
    finally:
        worker.close()
    assert worker.proc is None


def _one_token_step() -> dict:
    import torch

    from crossattn_sizing.core.slot_layout import SlotLayout
    from crossattn_sizing.impl.step import SlotStep

    i32 = torch.int32
    step = SlotStep(torch.tensor([5, 6], dtype=i32), 2, torch.tensor([0], dtype=i32),
                    torch.tensor([0, 1], dtype=i32), torch.tensor([3]), SlotLayout(16))  # fmt: skip
    return {"step": step, "out": torch.empty(1, dtype=torch.int64)}


# Bad input: one line, exit 2 -------------------------------------------------------------


def test_unknown_release_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(HarnessError, match="not a release version"):
        load_policy("vllm==banana")
    with pytest.raises(HarnessError, match=r"vllm==0\.99\.0 is not in the wheel cache .*--offline"):
        resolve_release("vllm==0.99.0", offline=True, cache=tmp_path / "engine")
    with pytest.raises(ReleaseUnavailable, match=r"expected vllm, vllm==X\.Y\.Z or vllm@PATH"):
        resolve_release("vllm>=0.24")


def test_cli_exits_2_with_one_line_for_a_release_it_cannot_get(tmp_path: Path) -> None:
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), CROSSATTN_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "crossattn_sizing", "verify", "--policy", "vllm==0.99.0"],
        capture_output=True, text=True, env=env, check=False, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "0.99.0 is not in the wheel cache" in lines[0]


def test_cross_group_is_where_the_sizing_bites() -> None:
    """Sanity of the shape used above: the cross group is group 1."""
    assert NEMOTRON.cross_groups() == [1] and NEMOTRON.groups[1].kind is GroupKind.CROSS


def test_a_config_the_release_cannot_represent_is_not_judged(workers: dict[str, EngineWorker]) -> None:
    """0.25.0 shards every attention group under DCP: a replicated group is discarded, not failed."""
    from hypothesis import find

    from crossattn_sizing.engine.client import Inexpressible

    policy = VllmPolicy("vllm==0.25.0", worker=workers["0.25.0"])
    replicated = NEMOTRON.replace(
        dcp_size=2, groups=(KVCacheGroup("full", 16, dcp_sharded=False), KVCacheGroup("cross", 16))
    )
    with pytest.raises(Inexpressible, match="no dcp_sharded field"):
        policy(replicated)
    assert repr(policy) == "VllmPolicy('vllm==0.25.0')"
    # Inside Hypothesis the example is discarded: a search over only such configs has nothing to judge.
    from hypothesis.errors import Unsatisfiable

    with pytest.raises(Unsatisfiable):
        find(st.just(replicated), lambda c: policy(c) is not None, settings=settings(max_examples=3))
    # The same through checked_widths, the path every property takes: discarded, not a PolicyCallError.
    with pytest.raises(Unsatisfiable):
        find(st.just(replicated), lambda c: checked_widths(policy, c) is not None,
             settings=settings(max_examples=3))  # fmt: skip


def test_audit_takes_the_executed_path_and_says_so(workers: dict[str, EngineWorker], tmp_path: Path) -> None:
    """``audit`` checks V2 on the release's executed sizing where it runs, else reads with the reason."""
    from crossattn_sizing.audit.executed import ExecutedPolicy
    from crossattn_sizing.audit.verdicts import audit_tree, sweep_configs
    from crossattn_sizing.base.outcome import Outcome
    from crossattn_sizing.commands.audit_report import detail_lines
    from crossattn_sizing.releases.sources import DirTree

    configs = sweep_configs()[:25]
    tree = DirTree(build_tree(tmp_path, "0.24.0") / "vllm", label="0.24.0")
    for version, status in (("0.24.0", Outcome.FAILS), ("0.25.0", Outcome.HOLDS)):
        executed = {"v2": (ExecutedPolicy(VllmPolicy(f"vllm=={version}", worker=workers[version])), "")}
        (verdict,) = audit_tree(tree, ["v2"], configs, executed=executed)
        assert (verdict.path, verdict.outcome) == ("executed", status)
        assert verdict.where is not None and verdict.where.startswith("executed: ")
        assert verdict.wall_s > 0 and verdict.to_dict()["path"] == "executed"
    assert verdict.nemotron is not None and verdict.nemotron["holds"]
    (read,) = audit_tree(tree, ["v2"], configs, executed={"v2": (None, "the wheel is not cached")})
    assert read.path == "read" and read.path_why == "the wheel is not cached"
    assert any("the wheel is not cached" in line for line in detail_lines(read))


def test_dependency_installer_names_and_refusals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the missing module's own distribution is ever installed; the engine and torch never are."""
    from crossattn_sizing.engine.client import top_level
    from crossattn_sizing.engine.install import DISTRIBUTIONS, add_dependency
    from crossattn_sizing.engine.worker import failure

    assert failure(ModuleNotFoundError("No module named 'zmq.asyncio'", name="zmq.asyncio")) == {
        "error": "ModuleNotFoundError: No module named 'zmq.asyncio'", "kind": "ModuleNotFoundError",
        "said": "ModuleNotFoundError: No module named 'zmq.asyncio'", "missing_module": "zmq.asyncio",
    }  # fmt: skip
    assert top_level("zmq.asyncio") == "zmq" and top_level(None) is None
    assert "missing_module" not in failure(ImportError("cannot import name 'x'"))
    assert DISTRIBUTIONS["zmq"] == "pyzmq" and DISTRIBUTIONS["attr"] == "attrs"
    release = Release("0.25.0", [str(tmp_path / "vllm-0.25.0"), str(tmp_path / "deps")])
    for module in ("vllm", "torch", "triton", "nvidia"):
        with pytest.raises(ReleaseUnavailable, match="never installs"):
            add_dependency(release, module)
    # A release resolved offline (audit --offline) stays offline: nothing read from the environment later.
    offline_release = Release("0.25.0", release.paths, offline=True)
    with pytest.raises(ReleaseUnavailable, match="--offline forbids"):
        add_dependency(offline_release, "cbor2")
    with pytest.raises(ReleaseUnavailable, match="is installed but does not import"):
        add_dependency(Release(None, installed=True), "cbor2")


# prove through the batched path (widths_many) -------------------------------------------

PROVE_GRID = Domain.parse(
    block_sizes="16,48", kernel_block_sizes="16,48", dcp_sizes="1-2", max_model_lens="448,2048,3329",
    encoder_budgets="1-9000:733", source_positions="absent,1500",
)  # fmt: skip
"""1,794 configs: kernel blocks below the block, DCP with every interleave, E past M with S absent."""


def _grid_configs() -> list[RunnerConfig]:
    """The grid's configs in canonical order (group shapes outer)."""
    rows, lengths = PROVE_GRID.groups.block_size.size, PROVE_GRID.num_lengths
    return [PROVE_GRID.config(g, j) for g in range(rows) for j in range(lengths)]


def test_batched_widths_are_the_single_widths(
    workers: dict[str, EngineWorker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``widths_many`` over two processes, in small batches, answers each config as ``policy(config)``."""
    monkeypatch.setattr(engine_vllm, "BATCH", 97)
    monkeypatch.setenv(ENGINE_WORKERS, "2")
    replicated = NEMOTRON.replace(
        dcp_size=2, groups=(KVCacheGroup("full", 16, dcp_sharded=False), KVCacheGroup("cross", 16))
    )
    configs = _grid_configs()
    configs[5:5] = [NEMOTRON, replicated, NEMOTRON.replace(max_model_len=448)]
    for version in ("0.24.0", "0.25.0"):
        policy = VllmPolicy(f"vllm=={version}", worker=workers[version])
        try:
            batched = policy.widths_many(configs)
            assert len(policy.workers) == 2 and all(w.proc is not None for w in policy.workers)
        finally:
            policy.end_batches()
        assert policy.workers == [policy.worker]
        assert len(batched) == len(configs)
        for config, answer in zip(configs, batched, strict=True):
            if config is replicated:
                assert isinstance(answer, Inexpressible) and "no dcp_sharded field" in str(answer)
                with pytest.raises(Inexpressible, match="no dcp_sharded field"):
                    policy(config)
            else:
                assert answer == policy(config), config.describe()


def test_a_tile_crosses_packed_and_is_answered_as_single_calls(
    workers: dict[str, EngineWorker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prove tile goes to two workers as bases and packed lengths, in parts of a few configs, and
    comes back packed: each answer is the single call's, a config the release cannot represent its
    own item (the tile's second base is such one)."""
    monkeypatch.setattr(engine_vllm, "TILE_BATCH", 7)
    monkeypatch.setenv(ENGINE_WORKERS, "2")
    replicated = NEMOTRON.replace(
        dcp_size=2, groups=(KVCacheGroup("full", 16, dcp_sharded=False), KVCacheGroup("cross", 16))
    )
    grid = tile_configs(PROVE_GRID, 0, PROVE_GRID.groups.block_size.size, 0, 11)
    tile = ConfigTile([grid.bases[0], replicated, grid.bases[-1]], grid.m, grid.e, grid.s)
    for version in ("0.24.0", "0.25.0"):
        policy = VllmPolicy(f"vllm=={version}", worker=workers[version])
        try:
            packed = policy.widths_many(tile)
        finally:
            policy.end_batches()
        assert isinstance(packed, PackedWidths) and len(packed) == len(tile) == 33
        for i, config in enumerate(tile):
            if i // 11 == 1:
                assert isinstance(packed[i], Inexpressible) and "no dcp_sharded field" in str(packed[i])
            else:
                assert packed[i] == policy(config), config.describe()


@pytest.mark.parametrize(("version", "model"), [("0.24.0", "mrv2-prefix"), ("0.25.0", "mrv2-pow2")])
def test_prove_on_the_recorded_release_gives_the_verdict_of_its_model(
    workers: dict[str, EngineWorker], version: str, model: str
) -> None:
    """Batched, one call per config and the vectorised model of the release find the same failures."""
    policy = VllmPolicy(f"vllm=={version}", worker=workers[version])
    batched = prove(PROVE_GRID, policy, examples=3)
    single = prove(PROVE_GRID, lambda config: policy(config), examples=3)
    modelled = prove(PROVE_GRID, BUILTIN_POLICIES[model], examples=3)
    assert batched.batched and not single.batched and modelled.vectorised
    assert batched.failures == single.failures == modelled.failures
    assert batched.counterexamples == single.counterexamples == modelled.counterexamples
    assert batched.holds is (version == "0.25.0") and batched.configs == PROVE_GRID.size


KILLING_LONG_ROWS = (FIXTURES / "0.25.0" / "block_table.py").read_text() + (
    "\n\nimport functools\n\n_init = BlockTables.__init__\n\n\n"
    "@functools.wraps(_init)\n"  # the adapter reads the constructor's parameters
    "def _init_or_die(self, *args, **kwargs):\n"
    "    if max(kwargs['max_num_blocks_per_group']) > 200:\n"
    "        import os, signal\n        os.kill(os.getpid(), signal.SIGSEGV)\n"
    "    _init(self, *args, **kwargs)\n\n\n"
    "BlockTables.__init__ = _init_or_die\n"
)  # tables longer than 200 blocks kill the process, as a kernel reading past its allocation can


def test_a_worker_crash_in_a_batch_fails_the_config_that_caused_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Meta-test: the batch that dies is asked again config by config; the first killing config fails."""
    monkeypatch.setenv(ENGINE_WORKERS, "1")
    worker = _worker(tmp_path, "0.25.0", block_table_source=KILLING_LONG_ROWS)
    model = BUILTIN_POLICIES["mrv2-pow2"]
    first = next(c for c in _grid_configs() if model(c)[0] // c.groups[0].bpk > 200)
    try:
        policy = VllmPolicy("vllm==0.25.0", worker=worker)
        with pytest.raises(PolicyRaised) as info:
            prove(PROVE_GRID, policy)
        assert info.value.config == first
        assert isinstance(info.value.error, EngineCrash) and "SIGSEGV" in str(info.value.error)
        row = prove_property(policy, "vllm==0.25.0", [PROVE_GRID])
        assert row.outcome == "fails" and "worker died (SIGSEGV)" in row.diagnosis
        assert first.describe() in row.diagnosis
        assert row.reproduce.startswith("crossattn-sizing check --policy vllm==0.25.0 --config ")
    finally:
        worker.close()


def test_worker_count_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENGINE_WORKERS, "3")
    assert parallel_workers() == 3
    monkeypatch.delenv(ENGINE_WORKERS)
    assert 1 <= parallel_workers() <= 4
    monkeypatch.setenv(ENGINE_WORKERS, "two")
    with pytest.raises(HarnessError, match=f"{ENGINE_WORKERS}='two': must be a positive integer"):
        parallel_workers()


def test_a_module_the_release_lacks_is_installed_by_name_and_the_worker_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker names the missing module (``ModuleNotFoundError.name``); the client installs its
    top-level package and starts again. The install is simulated: the package appears on the path."""
    from crossattn_sizing.engine import client

    tree = build_tree(tmp_path / "0.25.0", "0.25.0")
    utils = tree / "vllm" / "triton_utils.py"
    utils.write_text(utils.read_text() + "import lacking_dep_xyz.sub\n")
    installed: list[str] = []

    def install(release: Release, module: str) -> None:
        installed.append(module)
        (tree / module).mkdir()
        (tree / module / "__init__.py").write_text("")
        (tree / module / "sub.py").write_text("")

    monkeypatch.setattr(client, "add_dependency", install)
    worker = EngineWorker(Release("0.25.0", [str(tree)]))
    try:
        assert worker.start()["ready"] and installed == ["lacking_dep_xyz"]
    finally:
        worker.close()
