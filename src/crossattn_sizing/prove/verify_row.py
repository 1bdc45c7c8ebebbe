"""The ``prove`` verdict of a policy's capacity invariants, as one row of the verify report.

Why in verify: the properties sample; ``prove`` checks every config of the
bounded edge domain (:mod:`crossattn_sizing.prove.edges`). A policy that fails
anywhere there must never be shown as holding because 200 samples missed it,
so verify runs both and a failure of either fails the policy. A policy that
raises, or answers in the wrong shape, on some config of the domain is bad
input (:class:`PolicyCallError`, exit 2), as it is inside the property suite:
the row cannot be judged, and it never reads as holding.
"""

from __future__ import annotations

from collections.abc import Callable

from crossattn_sizing.base import usercode
from crossattn_sizing.base.errors import PolicyCallError
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.core.check_line import check_line
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.core.policies import Policy
from crossattn_sizing.findings.results import PropertyResult
from crossattn_sizing.prove.batches import PolicyRaised
from crossattn_sizing.prove.counterexamples import Counterexample
from crossattn_sizing.prove.domain import Domain
from crossattn_sizing.prove.edges import edge_domain
from crossattn_sizing.prove.sweep import prove_all

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


def stopped_on(spec: str, exc: PolicyRaised) -> PolicyCallError:
    """The one-line error for a policy that could not answer a config of the domain (prove stops there).

    Not a verdict: nothing says whether that config, or the rest of the domain,
    holds. It names the config and the ``check`` command that replays it.
    """
    config = exc.config
    if isinstance(exc.error, PolicyCallError):  # the user-code boundary's own line, config included
        what = str(exc.error)
    else:
        what = f"sizing policy {spec} {usercode.describe(exc.error)} on {config.describe()}"
    replay = check_line(spec, config, [config.encoder_budget])
    return PolicyCallError(f"{what}; prove stopped there, nothing judged; replay: {replay}")


def prove_property(
    policy: Policy,
    spec: str,
    parts: list[Domain] | None = None,
    progress: Callable[[int], None] | None = None,
) -> PropertyResult:
    """Run ``prove`` on the default edge domain (or ``parts`` of it) and report it like a property.

    ``progress`` receives the number of configs just checked (verify shows a bar).
    """
    parts = edge_domain() if parts is None else parts
    size = sum(p.size for p in parts)
    try:
        result = prove_all(parts, policy, examples=1, progress=progress)
    except PolicyRaised as exc:
        if isinstance(exc.error, PolicyCallError):  # the user's policy misbehaved: bad input
            raise stopped_on(spec, exc) from None
        # A crash in the engine's worker process is that config's failure (a verdict), named.
        return PropertyResult(
            NAME, Outcome.FAILS,
            diagnosis=f"the policy raised {exc} on {exc.config.describe()} (prove stopped there; "
            f"{size:,} configs in the edge domain)",
            reproduce=check_line(spec, exc.config, [exc.config.encoder_budget]),
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
        out.outcome = Outcome.HOLDS
        out.reason = skipped if result.not_judged else ""
        return out
    c = result.counterexamples[0]
    first = counterexample_config(c)
    out.outcome = Outcome.FAILS
    judged = f"{result.judged:,} judged" if result.not_judged else f"{size:,}"
    out.diagnosis = (
        f"coverage/allocation fail on {result.failures:,} of {judged} configs of the edge domain; "
        f"first: {first.describe()}: {c.encoder_len} encoder tokens need {c.entries_needed} entries "
        f"({c.entries_allocated} allocated), the row has {c.entries_given}"
    )
    out.reproduce = check_line(spec, first, [c.encoder_len])
    return out
