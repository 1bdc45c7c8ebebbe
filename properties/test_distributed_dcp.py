"""The attention properties with a fixed number of DCP ranks, C = 2 and C = 4.

Every config drawn by :func:`attention_configs` is given the DCP size under
test, so each example exercises the sharded layout, the per-rank partials and
their log-sum-exp merge. With ``--dcp-backend gloo`` (or ``nccl`` on CUDA) the
ranks are real ``torch.distributed`` processes, each holding only its own
KV-cache shard and block tables, exchanging ``(out, lse)`` with an all-gather;
with the default ``inprocess`` they are the simulation of
:mod:`crossattn_sizing.impl.runner`. Either way the merged output must equal the
reference's dense, unsharded attention.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.policies import Policy
from crossattn_sizing.distributed.backend import RunnerFactory
from crossattn_sizing.impl import Impl

from .impl_strategies import attention_configs
from .test_attention import check_cross_attention, check_self_attention

DCP_SIZES = (2, 4)
# test_attention.py already draws DCP sizes 1-4 in every run; these give each fixed size a
# quarter of the profile's examples, so the default run stays short (a distributed example
# costs a few round trips to the ranks).
assert settings.default is not None  # the plugin loaded a profile
SHARE = settings(max_examples=max(1, settings.default.max_examples // 4))


def dcp_configs(dcp_size: int) -> st.SearchStrategy[RunnerConfig]:
    """:func:`attention_configs` with ``dcp_size`` ranks (its interleaves divide every block size)."""
    return attention_configs().map(lambda config: config.replace(dcp_size=dcp_size))


@pytest.fixture(scope="module", params=DCP_SIZES, ids=[f"C={c}" for c in DCP_SIZES])
def dcp_size(request: pytest.FixtureRequest) -> int:
    """The DCP size, skipped with the reason where NCCL lacks a device per rank."""
    size = int(request.param)
    if request.config.getoption("dcp_backend") == "nccl":
        import torch

        found = torch.cuda.device_count()
        if found < size:
            pytest.skip(f"NCCL with {size} ranks needs {size} CUDA devices, this machine has {found}")
    return size


@SHARE
@given(data=st.data())
def test_self_attention_over_dcp_ranks(
    data: st.DataObject, impl: Impl, sizing_policy: Policy, dcp_runner: RunnerFactory, dcp_size: int
) -> None:
    """Causal prefill and decode, each rank attending over its shard; merged output equals dense attention."""
    check_self_attention(data, impl, sizing_policy, configs=dcp_configs(dcp_size), runner_factory=dcp_runner)


@pytest.mark.parametrize("guarded", [False, True], ids=["unguarded", "guarded"])
@SHARE
@given(data=st.data())
def test_cross_attention_over_dcp_ranks(
    data: st.DataObject, impl: Impl, sizing_policy: Policy, dcp_runner: RunnerFactory, dcp_size: int,
    guarded: bool,
) -> None:
    """Encoder keys sharded over the ranks (the consistent layout); merged output equals dense attention."""
    check_cross_attention(data, impl, sizing_policy, guarded, configs=dcp_configs(dcp_size),
                          runner_factory=dcp_runner)
