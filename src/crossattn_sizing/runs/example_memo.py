"""One example's memo: what the judge computes from an example's contents alone, kept while the shared run
judges that example for every policy.

In verify's shared run (:mod:`crossattn_sizing.runs.shared_run`) a property's
body runs once per distinct answer of the policies on the same drawn example.
The implementation under test must run each time (it sees the widths), but
the oracle's expected output depends only on the example's contents: the
float64 dense attention of properties/impl_scenarios.py was recomputed by
every body of the example, about a fifth of an attention body's CPU
(reports/bench_verify.md).

:func:`one_example` opens the memo for one example and drops it when the
example is judged, so the memo holds one example's values at most and no
verdict can take a value from another example. Outside it (a policy's own
run, a test calling a property body directly) :func:`memoised` computes every
time and keeps nothing. The key is the caller's: it must be the complete
input of the computation (every tensor's dtype, shape and values, every
scalar), never a seed or a summary of it; a value is handed out as stored,
so the caller stores something the body cannot alter (or copies it on the
way out). The memo lives in the judge's process: user code, which runs in
its own worker, never sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

_MEMO: ContextVar[dict[Hashable, Any] | None] = ContextVar("example_memo", default=None)


@contextmanager
def one_example() -> Iterator[dict[Hashable, Any]]:
    """A fresh memo for the bodies of one example, dropped when the example is judged (even by a raise)."""
    memo: dict[Hashable, Any] = {}
    token = _MEMO.set(memo)
    try:
        yield memo
    finally:
        _MEMO.reset(token)
        memo.clear()


def current() -> dict[Hashable, Any] | None:
    """The open example's memo, or None outside :func:`one_example` (for tests that inspect it)."""
    return _MEMO.get()


def memoised(key: Callable[[], Hashable], compute: Callable[[], T]) -> T:
    """``compute()``, computed once per open example for ``key()`` (the computation's complete input).

    ``key`` is called only inside an example: a policy's own run pays nothing for it.
    """
    memo = _MEMO.get()
    if memo is None:
        return compute()
    exact = key()
    if exact not in memo:
        memo[exact] = compute()
    return memo[exact]
