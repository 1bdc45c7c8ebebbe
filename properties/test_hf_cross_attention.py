"""Differential property: paged cross-attention through the implementation equals transformers' own.

For a tiny random-weight decoder cross-attention layer of Whisper, BART and
mBART (the modules the real decoders build, eager attention, fp32, eval mode):
the encoder output is projected with the module's own ``k_proj``/``v_proj``,
written into NaN-poisoned paged caches through the implementation under test
(``--impl``) with block tables sized by the policy under test
(``--policy``) for the RunnerConfig the model adapters derive from the
config; paged attention then runs with the module's ``q_proj`` and its
scaling, and ``out_proj`` is applied. The result must equal the module's own
forward on the same hidden states.

A policy that leaves encoder tokens without a column is refused by the guard
before any kernel runs and reported as a failure with the config it happened
for; a wrong scale, swapped K/V or a short row read unguarded change the
output and are caught by the comparison (tests/meta/test_meta_hf.py shows each).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every config is built locally; never reach for the hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("transformers", reason="the 'hf' extra (transformers) is not installed")

import torch
from hypothesis import example, given

from crossattn_sizing.base.errors import CapacityError
from crossattn_sizing.core import admission
from crossattn_sizing.core.check_line import check_line
from crossattn_sizing.core.policies import Policy, checked_widths, policy_name
from crossattn_sizing.impl import Impl
from crossattn_sizing.impl.runner import PagedRunner, Reads

from .failures import fail, fail_rerun, harness_options, judge_against
from .hf_strategies import (
    FAMILIES,
    HFCrossCase,
    cross_attention_module,
    hf_cross_cases,
    hidden_states,
)
from .impl_assertions import Tolerance
from .impl_strategies import pool_size
from .oracle import BlockPool

HF_TOLERANCE = Tolerance(
    rtol=1e-4,
    atol=1e-5,
    reason="both sides are fp32 and compute the same sums in a different order (matmul vs the "
    "implementation's reduction, then the same out_proj): rounding differences of a few ulp per "
    "term: max abs error 6e-7 observed over 400 random cases (<= 300 keys, embed dim <= 64, |out| <= 2.2), "
    "so >10x margin. The broken wirings of tests/meta/test_meta_hf.py shrink to errors of 1e-3 and up.",
)


@pytest.fixture(autouse=True, scope="module")
def _one_intra_op_thread():
    """Run torch single-threaded here: on tensors this small, intra-op threads cost more than they
    save (an example took ~10x longer with two threads on a loaded 2-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@dataclass(frozen=True)
class Wiring:
    """How the paged run is wired to the module. The default is right; meta-tests break one thing.

    ``drop_scaling``: leave the module's ``scaling`` out (scores scaled by 1).
    ``swap_kv``: write values as keys and keys as values.
    ``short_row``: give the cross rows one column less than the longest request needs and run
    unguarded, as the engine runs, so the short row shows in the output instead of a refusal.
    """

    drop_scaling: bool = False
    swap_kv: bool = False
    short_row: bool = False


CORRECT = Wiring()


@dataclass
class HFRun:
    """The module's output, the paged run's, and the lines that describe the run."""

    expected: torch.Tensor  # [sum of queries, E]
    got: torch.Tensor
    owner: list[int]  # request of each output row
    header: list[str]


def run_case(case: HFCrossCase, impl: Impl, policy: Policy, wiring: Wiring = CORRECT) -> HFRun:
    """Run one case both ways. Raises CapacityError when the guarded table refuses."""
    hf_config = case.hf_config()
    scenario = case.scenario()
    config = scenario.config
    module: Any = cross_attention_module(case, hf_config)  # torch types its layers as Tensor | Module
    dec, enc = hidden_states(case)
    heads, dim = case.num_heads, case.head_dim
    with torch.no_grad():
        expected = torch.cat(
            [module(d[None], key_value_states=x[None])[0][0] for d, x in zip(dec, enc, strict=True)]
        )
        keys = [module.k_proj(x).view(-1, heads, dim) for x in enc]
        values = [module.v_proj(x).view(-1, heads, dim) for x in enc]
        # The module's own scaling: folded into the query (Whisper) or applied to scores (BART).
        prescale = case.model_family.query_prescaled and not wiring.drop_scaling
        score_scale = 1.0 if (prescale or wiring.drop_scaling) else module.scaling
        queries = [module.q_proj(d) * (module.scaling if prescale else 1.0) for d in dec]
        queries = [q.view(-1, heads, dim) for q in queries]
    if wiring.swap_kv:
        keys, values = values, keys
    g = config.cross_groups()[0]
    group = config.groups[g]
    widths = list(checked_widths(policy, config))
    lens = list(case.encoder_lens)
    if wiring.short_row:
        widths[g] = max(admission.entries_needed(config, group, e) for e in lens) - 1
    rows = list(range(len(lens)))
    num_blocks = pool_size(config, group, lens, slack=2)
    runner = PagedRunner(
        config, tuple(widths), impl, num_blocks=num_blocks, num_heads=heads, head_dim=dim,
        dtype=torch.float32, guarded=not wiring.short_row,
    )
    runner.scale = score_scale
    pool = BlockPool(num_blocks, seed=case.pool_seed)
    header = [
        f"{case.family} decoder cross-attention: heads={heads} head_dim={dim}, requests with encoder "
        f"tokens {lens} and {list(case.num_queries)} decoder tokens",
        f"  adapters:  e={scenario.encoder_len.value} ({scenario.encoder_len.why}); "
        f"M={scenario.max_model_len.value} ({scenario.max_model_len.why})",
        f"  config:    {config.describe()}",
        f"  policy:    {policy_name(policy)}, widths {tuple(widths)} entries per group; impl {impl.name}",
    ]
    with torch.no_grad():
        for row, e in zip(rows, lens, strict=True):  # all ids appended before the step, as the engine does
            runner.append(g, row, pool.allocate(admission.blocks_allocated(config, group, e)))
        runner.write(g, rows, [range(e) for e in lens], keys, values)
        out = runner.attend(g, Reads.cross(rows, queries, lens))
        got = module.out_proj(out.reshape(out.shape[0], heads * dim).to("cpu", torch.float32))
    owner = [r for r, nq in enumerate(case.num_queries) for _ in range(nq)]
    return HFRun(expected, got, owner, header)


def mismatch(run: HFRun, tol: Tolerance = HF_TOLERANCE) -> str | None:
    """A per-request diagnosis of outputs outside the tolerance, or None when all match."""
    close = torch.isclose(run.got, run.expected, rtol=tol.rtol, atol=tol.atol)
    if bool(close.all()):
        return None
    owner = torch.tensor(run.owner)
    lines = ["paged cross-attention differs from transformers' own forward", *run.header]
    for r in sorted(set(run.owner)):
        mask = owner == r
        err = (run.got[mask] - run.expected[mask]).abs()
        nan = bool(run.got[mask].isnan().any())
        bad = int((~close[mask]).sum())
        what = f"max abs error {float(err.max()):.3g}"
        if nan:
            what = "NaN in the output (a poisoned cell was read)"
        lines.append(f"  request {r}: {bad} of {err.numel()} output values off; {what}")
    lines.append(f"  tolerance: rtol={tol.rtol}, atol={tol.atol}: {tol.reason}")
    return "\n".join(lines)


def assert_matches_transformers(
    case: HFCrossCase, impl: Impl, policy: Policy, policy_spec: str = "", wiring: Wiring = CORRECT
) -> None:
    """The property's assertion: a refusal or an output mismatch fails with a diagnosis."""
    try:
        run = run_case(case, impl, policy, wiring)
    except CapacityError as exc:
        refused = exc  # failed below, out of this handler: the diagnosis says it all, no chained traceback
    else:
        judge_against(run.expected.flatten().tolist(), "transformers' own forward")
        problem = mismatch(run)
        if problem is not None:
            fail_rerun([problem], harness_options(impl, policy))
        return
    scenario, spec = case.scenario(), policy_spec or policy_name(policy)
    fail(
        [
            f"sizing policy {spec!r} leaves encoder tokens of this "
            f"{case.family} config without a column (refused before any kernel ran)",
            f"  config:    {scenario.config.describe()}",
            f"  adapters:  M={scenario.max_model_len.value} ({scenario.max_model_len.why})",
            f"  {refused}",
        ],
        check_line(spec, scenario.config, case.encoder_lens),
    )


# Pinned: BART with --max-model-len below its source length (the pre-fix bug's shape for BART),
# and Whisper at its S on a block edge plus one, with kernel-block expansion.
PINNED = {
    "bart": HFCrossCase("bart", 2, 4, 96, None, 32, (96, 33), (1, 2), 16, 16, 1, 2),
    "mbart": HFCrossCase("mbart", 1, 8, 50, None, None, (50,), (3,), 3, 1, 3, 4),
    "whisper": HFCrossCase("whisper", 2, 2, 16, 65, None, (65, 65), (1, 1), 8, 4, 5, 6),
}


def _property(family: str):
    @given(case=hf_cross_cases(family))
    def prop(impl: Impl, sizing_policy: Policy, sizing_policy_spec: str, case: HFCrossCase) -> None:
        assert_matches_transformers(case, impl, sizing_policy, sizing_policy_spec)

    if family in PINNED:
        prop = example(case=PINNED[family])(prop)
    prop.__name__ = f"test_{family.replace('-', '_')}_cross_attention_matches_transformers"
    prop.__doc__ = f"Paged cross-attention equals {family}'s own cross-attention forward."
    return prop


# One property per registered family with a transformers module (models/families/).
for _family in FAMILIES:
    _prop = _property(_family)
    globals()[_prop.__name__] = _prop
del _family, _prop
