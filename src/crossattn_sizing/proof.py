"""The ``prove`` verdict of a policy's capacity invariants, as one row of the verify report.

Why in verify: the properties sample; ``prove`` checks every config of the
bounded edge domain (:mod:`crossattn_sizing.edges`). A policy that fails
anywhere there must never be shown as holding because 200 samples missed it,
so verify runs both and a failure of either fails the policy. A policy that
raises, or answers in the wrong shape, on some config of the domain fails
this row too: it did not hold.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable

from crossattn_sizing.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.edges import edge_domain
from crossattn_sizing.policies import Policy
from crossattn_sizing.prove import Counterexample, Domain, PolicyRaised, prove_all
from crossattn_sizing.results import PropertyResult

NAME = "prove::capacity_on_edge_domain"


def counterexample_config(c: Counterexample) -> RunnerConfig:
    """The one-group config a counterexample names."""
    return RunnerConfig(
        max_model_len=c.max_model_len,
        max_num_batched_tokens=c.max_num_batched_tokens,
        groups=(KVCacheGroup(GroupKind.CROSS, c.block_size, c.kernel_block_size),),
        max_num_encoder_input_tokens=c.max_num_encoder_input_tokens,
        max_source_positions=c.max_source_positions,
        dcp_size=c.dcp_size,
        dcp_interleave=c.dcp_interleave,
    )


def check_command(spec: str, config: RunnerConfig, encoder_tokens: int) -> str:
    """The ``check`` command that replays one config of the domain."""
    text = json.dumps(config.to_dict(), separators=(",", ":"), sort_keys=True)
    return (
        f"crossattn-sizing check --policy {shlex.quote(spec)} --config {shlex.quote(text)} "
        f"--encoder-lens {encoder_tokens}"
    )


def prove_property(
    policy: Policy,
    spec: str,
    parts: list[Domain] | None = None,
    progress: Callable[[int], None] | None = None,
) -> PropertyResult:
    """Run ``prove`` on the default edge domain (or ``parts`` of it) and report it like a property.

    ``progress`` receives the number of configs just checked (verify shows a bar).
    """
    start = time.perf_counter()
    parts = edge_domain() if parts is None else parts
    size = sum(p.size for p in parts)
    try:
        result = prove_all(parts, policy, examples=1, progress=progress)
    except PolicyRaised as exc:  # the policy (or its worker) failed on one config: that config fails
        return PropertyResult(
            NAME, "fails",
            diagnosis=f"the policy raised {exc} on {exc.config.describe()} (prove stopped there; "
            f"{size:,} configs in the edge domain)",
            reproduce=check_command(spec, exc.config, exc.config.encoder_budget),
            duration_s=time.perf_counter() - start,
        )  # fmt: skip
    except Exception as exc:  # a user's policy raising is its failure on this domain, not ours
        return PropertyResult(
            NAME, "fails", diagnosis=f"prove could not finish: the policy raised {type(exc).__name__}: {exc}",
            duration_s=time.perf_counter() - start,
        )  # fmt: skip
    # ``examples`` counts the configs judged: a row with none is no verdict at all ("not run").
    out = PropertyResult(NAME, duration_s=result.seconds, examples=result.judged)
    skipped = (
        f"{result.not_judged:,} of {size:,} configs of the edge domain are not judged: the policy's "
        "engine cannot represent them"
    )
    if result.judged == 0:
        out.reason = skipped if result.not_judged else "the edge domain is empty"
        return out
    if result.holds:
        out.outcome = "holds"
        out.reason = skipped if result.not_judged else ""
        return out
    c = result.counterexamples[0]
    first = counterexample_config(c)
    out.outcome = "fails"
    judged = f"{result.judged:,} judged" if result.not_judged else f"{size:,}"
    out.diagnosis = (
        f"coverage/allocation fail on {result.failures:,} of {judged} configs of the edge domain; "
        f"first: {first.describe()}: {c.encoder_tokens} encoder tokens need {c.entries_needed} entries "
        f"({c.entries_allocated} allocated), the row has {c.entries_given}"
    )
    out.reproduce = check_command(spec, first, c.encoder_tokens)
    return out
