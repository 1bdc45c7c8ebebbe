"""The example budget of a run whose implementation is a vLLM release's own kernels (``--impl vllm==X``).

On a CPU machine those kernels run in Triton's interpreter, in the release's
worker process: an attention example costs seconds, not the milliseconds the
profiles' budgets (200 for ``ci``, 5,000 for ``nightly``) were sized for. An
engine run therefore takes at most :data:`DEFAULT_EXAMPLES` examples per
property (``CROSSATTN_ENGINE_EXAMPLES`` to change it) and does not shrink a
failure (shrinking replays hundreds of examples; the unshrunk one is reported,
with its blob). Everything else of the selected profile stays (database,
derandomisation, health checks).
"""

from __future__ import annotations

from hypothesis import Phase, settings

from crossattn_sizing.base import settings as env

DEFAULT_EXAMPLES = 10
PROFILE = "engine-budget"


def engine_examples() -> int:
    """:data:`~crossattn_sizing.base.settings.ENGINE_EXAMPLES` when set (a positive integer), else
    :data:`DEFAULT_EXAMPLES`."""
    examples = env.engine_examples()
    return DEFAULT_EXAMPLES if examples is None else examples


def load_engine_budget() -> str:
    """Load the current profile capped to the engine budget; the line saying so (for the header)."""
    base = settings.default
    assert base is not None  # a profile is always loaded (crossattn_sizing.base.settings)
    examples = min(base.max_examples, engine_examples())
    phases = tuple(p for p in base.phases if p is not Phase.shrink)
    settings.register_profile(PROFILE, settings(base, max_examples=examples, phases=phases))
    settings.load_profile(PROFILE)
    return (
        f"engine budget: {examples} examples per property, no shrinking (interpreted kernels take seconds "
        f"per example; {env.ENGINE_EXAMPLES} sets it)"
    )
