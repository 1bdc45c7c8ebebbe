"""Differential attention properties: paged attention through the block tables equals dense attention.

Run against ``--impl`` on ``--device`` with the widths of ``--policy``.
Each scenario writes every token's distinct key and value by slot into
NaN-poisoned caches and reads them back through the request's row; the oracle
(reference/, float64) attends densely over the request's own keys. Outputs must
match within the dtype's tolerance (properties/impl_assertions.py) and stay
finite.

Cross-attention runs both table modes. Unguarded is the engine: under the
pre-fix sizing (``--policy mrv2-prefix``) a Nemotron-Parse-like request
spills ids into its neighbour's row and the property fails showing the wrong
output. Guarded refuses the same access before any kernel runs, and the
property fails with the structured capacity error. Under ``mrv2`` both hold.
With DCP (``C > 1``) cross-attention runs the consistent sharded layout; the
engine's unsharded path is the finding of properties/test_dcp_finding.py.
"""

from __future__ import annotations

from typing import Literal

import pytest
import torch
from hypothesis import event, given
from hypothesis import strategies as st

from crossattn_sizing.base.errors import CapacityError
from crossattn_sizing.core import admission, known_configs
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.policies import Policy, checked_widths
from crossattn_sizing.distributed.backend import RunnerFactory
from crossattn_sizing.impl import Impl
from crossattn_sizing.impl.runner import PagedRunner

from .failures import harness_options
from .impl_assertions import assert_outputs_match, fail_refused
from .impl_scenarios import ScenarioRun, run_cross, run_self, scenario_header
from .impl_strategies import (
    AttentionShape,
    CrossCase,
    attention_configs,
    attention_shapes,
    content_scales,
    cross_cases,
    seeds,
    self_cases,
)


def _assert_run(run: ScenarioRun, dtype: torch.dtype, options: list[str]) -> None:
    assert_outputs_match(
        run.out, run.expected, run.query_owner, run.query_position, run.reports, run.header, dtype,
        run.mass, run.score_abs, run.num_keys, options,
    )  # fmt: skip


def _options(impl: Impl, policy: Policy, runner_factory: RunnerFactory) -> list[str]:
    """The harness options of a run, for its rerun line (a distributed factory names its backend)."""
    return harness_options(impl, policy, getattr(runner_factory, "backend", "inprocess"))


def check_cross_attention(
    data: st.DataObject, impl: Impl, policy: Policy, guarded: bool, *,
    configs: st.SearchStrategy[RunnerConfig] | None = None, runner_factory: RunnerFactory = PagedRunner,
) -> None:
    """The body of the cross-attention property, shared with the meta-tests and the distributed suite."""
    config = data.draw(attention_configs() if configs is None else configs, label="config")
    case = data.draw(cross_cases(config), label="requests")
    shape = data.draw(attention_shapes(), label="shape")
    scales = data.draw(content_scales(shape.dtype), label="content_scales")
    seed = data.draw(seeds(), label="content_seed")
    pool_seed = data.draw(seeds(), label="pool_seed")
    widths = checked_widths(policy, config)
    mode: Literal["unsharded", "sharded"] = "unsharded" if config.dcp_size == 1 else "sharded"
    event(f"cross-attention {mode}")
    g = config.cross_groups()[0]
    group = config.groups[g]
    per_entry = group.kbs * (1 if mode == "unsharded" else config.dcp_size)
    if any(-(-e // per_entry) > widths[g] for e in case.encoder_lens):
        event("some request needs more entries than the policy gives")
    try:
        run = run_cross(
            impl, policy, config, widths, case, shape, seed, pool_seed, guarded=guarded, mode=mode,
            scales=scales, runner_factory=runner_factory,
        )  # fmt: skip
    except CapacityError as err:
        header = scenario_header(
            "paged cross-attention could not run", impl, policy, config, widths, guarded, shape
        )
        header.append(f"  encoder lengths {list(case.encoder_lens)} in rows {list(case.rows)}")
        fail_refused(err, header, _options(impl, policy, runner_factory))
    _assert_run(run, shape.dtype, _options(impl, policy, runner_factory))


def check_self_attention(
    data: st.DataObject, impl: Impl, policy: Policy, *,
    configs: st.SearchStrategy[RunnerConfig] | None = None, runner_factory: RunnerFactory = PagedRunner,
    shapes: st.SearchStrategy[AttentionShape] | None = None,
) -> None:
    """The body of the self-attention (DCP, causal) property, shared with meta-tests and distributed suite.

    ``configs`` and ``shapes`` narrow the draws for a test that must reach one path (the engine's DCP
    correction takes power-of-two DCP sizes and head sizes only).
    """
    config = data.draw(attention_configs() if configs is None else configs, label="config")
    case = data.draw(self_cases(config), label="requests")
    shape = data.draw(attention_shapes() if shapes is None else shapes, label="shape")
    scales = data.draw(content_scales(shape.dtype), label="content_scales")
    seed = data.draw(seeds(), label="content_seed")
    pool_seed = data.draw(seeds(), label="pool_seed")
    widths = checked_widths(policy, config)
    if any(case.decode):
        event("decode step after the prefill")
    try:
        run = run_self(
            impl, policy, config, widths, case, shape, seed, pool_seed, guarded=True, scales=scales,
            runner_factory=runner_factory,
        )  # fmt: skip
    except CapacityError as err:
        header = scenario_header(
            "paged self-attention could not run", impl, policy, config, widths, True, shape
        )
        fail_refused(err, header, _options(impl, policy, runner_factory))
    _assert_run(run, shape.dtype, _options(impl, policy, runner_factory))


@pytest.mark.parametrize("guarded", [False, True], ids=["unguarded", "guarded"])
@given(data=st.data())
def test_cross_attention_matches_dense(
    data: st.DataObject, impl: Impl, sizing_policy: Policy, guarded: bool, dcp_runner: RunnerFactory
) -> None:
    """Decode queries over each request's encoder keys, read through its row, equal dense attention."""
    check_cross_attention(data, impl, sizing_policy, guarded, runner_factory=dcp_runner)


@given(data=st.data())
def test_self_attention_matches_dense(
    data: st.DataObject, impl: Impl, sizing_policy: Policy, dcp_runner: RunnerFactory
) -> None:
    """Causal prefill and decode over DCP-sharded caches, merged by log-sum-exp, equal dense attention."""
    check_self_attention(data, impl, sizing_policy, runner_factory=dcp_runner)


def check_nemotron_parse(impl: Impl, policy: Policy, guarded: bool) -> None:
    """Two full-page requests in neighbouring rows, as a server batches them."""
    config = known_configs.nemotron_parse().replace(max_num_reqs=2)
    e = known_configs.NEMOTRON_PAGE_TOKENS
    # The harness's own precondition, not the property: the known config admits its page (else
    # known_configs changed, and no policy or implementation is to blame).
    assert admission.admits(config, e), f"{e} encoder tokens are no longer admitted by the known config"
    case = CrossCase(rows=(0, 1), encoder_lens=(e, e), num_queries=(1, 1))
    shape = AttentionShape(num_heads=1, head_dim=4, dtype=torch.float32)
    widths = checked_widths(policy, config)
    try:
        run = run_cross(impl, policy, config, widths, case, shape, seed=7, pool_seed=11,
                        guarded=guarded, mode="unsharded")
    except CapacityError as err:
        header = scenario_header(
            "Nemotron-Parse page could not run", impl, policy, config, widths, guarded, shape
        )
        fail_refused(err, header, harness_options(impl, policy))
    _assert_run(run, shape.dtype, harness_options(impl, policy))


@pytest.mark.parametrize("guarded", [False, True], ids=["unguarded", "guarded"])
def test_nemotron_parse_page(impl: Impl, sizing_policy: Policy, guarded: bool) -> None:
    """The known bug shape at full size: 3329 encoder tokens, --max-model-len 2048, bs 16."""
    check_nemotron_parse(impl, sizing_policy, guarded)
