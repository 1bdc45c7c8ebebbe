"""Meta-tests of distributed DCP over gloo: it holds, agrees with the simulation, and can fail.

- under the fixed sizing the properties hold with C = 2 and C = 4 real ranks;
- the same examples give the same outputs in process and over the ranks;
- a merge without log-sum-exp weights and a wrong rank ownership, loaded by
  each rank from its spec, are caught by the distributed properties;
- a rank that dies or hangs fails the example naming the rank, within the
  timeout, and leaves no process behind; ranks exit when their driver dies.

Budgets are example counts. The only clock is the hung-rank test's timeout,
which is what that test is about; the other limits are safety nets.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from crossattn_sizing.base.processes import alive
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.core.policies import BUILTIN_POLICIES, checked_widths
from crossattn_sizing.distributed.backend import DistributedDcp, runner_factory
from crossattn_sizing.distributed.pool import RankFailure, RankPool
from crossattn_sizing.impl import TorchImpl
from crossattn_sizing.impl.runner import PagedRunner
from properties.impl_scenarios import run_cross, run_self
from properties.impl_strategies import (
    AttentionShape,
    SelfCase,
    attention_shapes,
    cross_cases,
    seeds,
    self_cases,
)
from properties.test_attention import check_cross_attention, check_self_attention
from properties.test_distributed_dcp import DCP_SIZES, dcp_configs
from tests.broken_impls import InterleaveIgnored, MergeWithoutLse
from tests.meta.test_meta_impl import CAUGHT, failure

pytestmark = pytest.mark.slow

MRV2 = BUILTIN_POLICIES["mrv2"]
# Enough examples to meet interleave > 1 and several requests; no shrinking (a failing
# example is all a meta-test needs, see meta/test_meta_impl.py).
FEW = settings(CAUGHT, max_examples=30)
# The ci profile's budget for the broken implementations: a wrong ownership only shows
# with interleave > 1 and a causal mask or a partial last block, as in meta/test_meta_impl.py.
CI_BUDGET = CAUGHT
SAFETY_S = 600


@pytest.fixture(scope="module")
def gloo() -> Iterator[DistributedDcp]:
    backend = DistributedDcp("gloo", "torch")
    yield backend
    pids = [pid for pool in backend.pools.values() for pid in pool.pids]
    backend.close()
    assert pids and not any(alive(pid) for pid in pids)


@pytest.mark.parametrize("c", DCP_SIZES)
def test_properties_hold_over_gloo_ranks_under_the_fixed_sizing(c: int, gloo: DistributedDcp) -> None:
    impl = TorchImpl("cpu")
    configs = dcp_configs(c)
    assert failure(lambda d: check_self_attention(d, impl, MRV2, configs=configs, runner_factory=gloo), FEW) \
        is None
    for guarded in (False, True):
        assert failure(lambda d, g=guarded: check_cross_attention(
            d, impl, MRV2, g, configs=configs, runner_factory=gloo), FEW) is None
    assert gloo.pools[c].starts == 1  # one process group for every example


def _identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


@pytest.mark.parametrize("c", DCP_SIZES)
def test_same_outputs_as_in_process_on_the_same_examples(c: int, gloo: DistributedDcp) -> None:
    impl = TorchImpl("cpu")
    compared = []

    @FEW
    @given(data=st.data())
    def prop(data: st.DataObject) -> None:
        config = data.draw(dcp_configs(c))
        shape = data.draw(attention_shapes())
        seed, pool_seed = data.draw(seeds()), data.draw(seeds())
        widths = checked_widths(MRV2, config)
        if data.draw(st.booleans(), label="self-attention"):
            case = data.draw(self_cases(config))
            runs = [run_self(impl, MRV2, config, widths, case, shape, seed, pool_seed, guarded=True,
                             runner_factory=f) for f in (PagedRunner, gloo)]
        else:
            case = data.draw(cross_cases(config))
            runs = [run_cross(impl, MRV2, config, widths, case, shape, seed, pool_seed, guarded=True,
                              mode="sharded", runner_factory=f) for f in (PagedRunner, gloo)]
        # Bit for bit: the ranks compute the same partials and merge them in the same order.
        assert _identical(runs[0].out, runs[1].out), (runs[0].out, runs[1].out)
        compared.append(shape.dtype)

    prop()
    assert len(compared) >= 20  # examples really ran (a few may be rejected by assumptions)


@pytest.mark.parametrize("c", DCP_SIZES)
@pytest.mark.parametrize("broken", [MergeWithoutLse, InterleaveIgnored], ids=lambda b: b.name)
def test_distributed_properties_catch_a_broken_merge_and_rank_ownership(c: int, broken: type) -> None:
    # Each rank loads the broken implementation itself from its spec: the merge and the
    # ownership under test are the ones that run in the worker processes.
    backend = DistributedDcp("gloo", f"tests.broken_impls:{broken.__name__}")
    impl = broken("cpu")
    try:
        message = failure(lambda d: check_self_attention(d, impl, MRV2, configs=dcp_configs(c),
                                                         runner_factory=backend), CI_BUDGET)
    finally:
        backend.close()
    assert message is not None, f"the distributed self-attention property missed {broken.name} with C={c}"
    assert "WRONG OUTPUT" in message


def _one_dcp_scenario(backend: DistributedDcp) -> None:
    config = RunnerConfig(max_model_len=64, max_num_batched_tokens=64, dcp_size=2, max_num_reqs=2,
                          groups=(KVCacheGroup(GroupKind.CROSS, 4), KVCacheGroup(GroupKind.FULL, 4)))
    case = SelfCase((0, 1), (5, 9), (True, False))
    run_self(TorchImpl("cpu"), MRV2, config, checked_widths(MRV2, config), case,
             AttentionShape(1, 4, torch.float32), 1, 2, guarded=True, runner_factory=backend)


def test_a_rank_that_dies_fails_the_example_naming_it_and_is_restarted() -> None:
    backend = DistributedDcp("gloo", "tests.broken_impls:DiesOnRank1", timeout_s=SAFETY_S)
    try:
        pool = backend.pool(2).start()
        first = pool.pids
        died = r"DCP rank 1 of 2 \(gloo\) died during 'attend': exit status 17"
        with pytest.raises(RankFailure, match=died):
            _one_dcp_scenario(backend)
        assert not pool.running and not any(alive(pid) for pid in first)
        with pytest.raises(RankFailure, match="DCP rank 1 of 2"):  # a fresh group, same bug
            _one_dcp_scenario(backend)
        assert pool.starts == 2
    finally:
        backend.close()


def test_a_rank_that_hangs_fails_the_example_naming_it_within_the_timeout() -> None:
    timeout = 5.0  # the clock is the subject here; a healthy step answers in milliseconds
    backend = DistributedDcp("gloo", "tests.broken_impls:HangsOnRank1", timeout_s=timeout)
    try:
        pids = backend.pool(2).start().pids
        start = time.monotonic()
        with pytest.raises(RankFailure) as info:
            _one_dcp_scenario(backend)
        waited = time.monotonic() - start
    finally:
        backend.close()
    message = str(info.value)
    assert "DCP rank 1 of 2 (gloo) did not answer 'attend' within 5s (hung)" in message
    assert "rank 0 waited for it in the all-gather" in message
    assert timeout <= waited < SAFETY_S
    assert not any(alive(pid) for pid in pids)


DRIVER = """
import os, sys
from crossattn_sizing.distributed.backend import DistributedDcp
pool = DistributedDcp("gloo", "torch").pool(2).start()
print(" ".join(map(str, pool.pids)), flush=True)
os._exit(0)  # no atexit, no teardown: the ranks must notice on their own
"""


def test_ranks_exit_when_their_driver_dies_without_teardown() -> None:
    proc = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True, timeout=SAFETY_S)
    assert proc.returncode == 0, proc.stderr
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + SAFETY_S
    while any(alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"DCP ranks {pids} outlived their driver"
        time.sleep(0.05)


def test_a_grandchild_of_a_rank_in_a_session_of_its_own_ends_with_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rank runs under a supervisor that is a child subreaper: a process the implementation
    starts in a session of its own (out of the rank's process group, its parent gone) is ended by its
    id when the pool closes, and the pool's ``crossattn-dcp-*`` folder is gone with it.

    Meta: each grandchild is in a session other than every rank's, so ending the ranks' process
    groups, as the pool did before, does not reach it: the check below could fail."""
    monkeypatch.setenv("HOSTILE_PID_DIR", str(tmp_path))
    pool = RankPool("gloo", 2, "tests.hostile_code:LeavesSetsidGrandchild", timeout_s=SAFETY_S)
    grandchildren: list[int] = []
    try:
        pool.start()
        folder, sessions = pool.dir, {os.getsid(pid) for pid in pool.pids}
        grandchildren = [int(p.read_text()) for p in tmp_path.iterdir() if not p.name.endswith(".part")]
        assert len(grandchildren) >= 2, "every rank creates the implementation, so each starts one"
        assert all(alive(pid) and os.getsid(pid) not in sessions for pid in grandchildren)
        pool.close()
        ends = time.monotonic() + 10.0  # killed before close returns; a SIGKILL lands within moments
        while any(alive(pid) for pid in grandchildren) and time.monotonic() < ends:
            time.sleep(0.1)
        assert not any(alive(pid) for pid in grandchildren), "a rank's setsid grandchild outlived the pool"
        assert folder is not None and folder.name.startswith("crossattn-dcp-") and not folder.exists()
    finally:
        pool.close()
        for pid in grandchildren:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def test_inprocess_is_the_simulation_and_nccl_needs_cuda() -> None:
    assert runner_factory("inprocess", "torch") is PagedRunner
    from crossattn_sizing.base.errors import HarnessError

    with pytest.raises(HarnessError, match="nccl needs --device cuda"):
        DistributedDcp("nccl", "torch", "cpu")
