"""Capacity over the cross-pool layout: every admitted request's encoder tokens fit the engine's cross pool.

TensorRT-LLM keeps cross-attention K/V in a pool of its own
(:class:`~crossattn_sizing.core.layouts.CrossPool`), sized once per engine by
its own ``KvCacheCreator._get_cross_kv_cache_layout``. The property: for every
admitted request (:func:`properties.cross_pool_strategies.cross_pool_cases`),
its encoder tokens fit the pool's maximum sequence length and the blocks of
``tokens_per_block`` a sequence of that length gets. The sizer is an engine
adapter's (``tensorrt_llm@PATH``: its family's ``sizer``, found through the engine registry),
or any object with ``name`` and ``pool_len(case)``.

Not a ``test_`` module: the suite's other properties judge a vLLM sizing
policy, and this one has no policy to take; it is run with an engine by
``verify --engine tensorrt_llm@PATH``, the tests of the adapter and its
meta-test, each handing it the sizer. A case the engine's code could not be
asked about (:class:`~crossattn_sizing.core.cross_pool.CrossPoolNotRun`) is
skipped with the reason: never a pass, never a failure.
"""

from __future__ import annotations

from typing import Protocol

import pytest
from hypothesis import given

from crossattn_sizing.core.cross_pool import CrossPoolCase, CrossPoolNotRun

from .cross_pool_strategies import cross_pool_cases
from .failures import fail


class CrossPoolSizer(Protocol):
    """What the property asks: the cross pool's length for a case (CrossPoolNotRun if it cannot say)."""

    @property
    def name(self) -> str:
        """The sizer's spec, for the replay line."""
        ...

    def pool_len(self, case: CrossPoolCase) -> int:
        """The cross pool's maximum sequence length for ``case``'s config and engine settings."""
        ...


def judge(sizer: CrossPoolSizer, case: CrossPoolCase) -> None:
    """Fail (with the case, its pool and the ``check`` line replaying it) when encoder tokens do not fit."""
    try:
        pool = sizer.pool_len(case)
    except CrossPoolNotRun as exc:
        pytest.skip(f"not run: {exc}")
    found = case.overflows(pool)
    if found:
        lines = [
            f"cross-pool capacity fails under {sizer.name}",
            *(f"  {line}" for line in case.describe(pool)),
        ]
        lines += [f"  cross pool: {u.needed} {u.unit} needed, {u.width} held" for u in found]
        fail(lines, case.check_line(sizer.name))


@given(case=cross_pool_cases())
def encoder_tokens_fit_the_cross_pool(case: CrossPoolCase, sizer: CrossPoolSizer) -> None:
    """No admitted request has more encoder tokens than the cross pool (or its blocks) holds."""
    judge(sizer, case)
