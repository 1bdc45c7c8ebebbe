"""Dense attention with log-sum-exp, and the DCP merge of partial results.

Each query's output is a softmax-weighted average of value vectors; alongside it the
log-sum-exp (lse) of the scaled scores is returned, because that is what DCP ranks
exchange: a rank attends over its share of the keys and the shares are combined by
``merge_partials`` without seeing each other's keys.

Sums use ``math.fsum`` so the oracle's own rounding stays far below the tolerances the
differential tests use. NaN inputs (a poisoned cache cell) propagate to the output on
purpose.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Matrix = list[list[float]]


def logsumexp(xs: Sequence[float]) -> float:
    """``log(sum(exp(x)))`` computed as ``m + log(sum(exp(x - m)))`` with ``m = max(x)``.

    Terms equal to ``-inf`` contribute nothing; an empty or all ``-inf`` input gives
    ``-inf``; any NaN gives NaN (``max`` would otherwise hide it, depending on order).
    """
    if any(math.isnan(x) for x in xs):
        return math.nan
    finite = [x for x in xs if x != -math.inf]
    if not finite:
        return -math.inf
    m = max(finite)
    if m == math.inf:
        return math.inf
    return m + math.log(math.fsum(math.exp(x - m) for x in finite))


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) != len(b):
        raise ValueError(f"dot product of vectors of lengths {len(a)} and {len(b)}")
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def attention(
    q: Matrix,
    keys: Matrix,
    values: Matrix,
    scale: float,
    causal: bool = False,
    q_positions: list[int] | None = None,
    k_positions: list[int] | None = None,
    head_dim_v: int | None = None,
) -> tuple[Matrix, list[float]]:
    """Softmax attention of each query over the keys it may see.

    Returns ``(out, lse)``: ``out[i]`` is ``sum_j w_ij * values[j]`` with
    ``w_ij = exp(s_ij - lse_i)``, ``s_ij = scale * dot(q[i], keys[j])``, over the visible
    keys. With ``causal`` a key is hidden from a query when its position is larger than
    the query's; positions default to ``0, 1, ...`` for queries and keys alike. A query
    that sees no key gets a zero output and ``lse = -inf``, which makes it drop out of
    a merge. ``head_dim_v`` sets the output width when there are no values to take it
    from (default: the width of ``q``).
    """
    if len(keys) != len(values):
        raise ValueError(f"{len(keys)} keys but {len(values)} values")
    if q_positions is None:
        q_positions = list(range(len(q)))
    if k_positions is None:
        k_positions = list(range(len(keys)))
    if len(q_positions) != len(q) or len(k_positions) != len(keys):
        raise ValueError("q_positions/k_positions must have one entry per query/key")
    if head_dim_v is None:
        head_dim_v = len(values[0]) if values else (len(q[0]) if q else 0)
    if any(len(v) != head_dim_v for v in values):
        raise ValueError(f"every value vector must have length {head_dim_v}")

    out: Matrix = []
    lse: list[float] = []
    for query, q_pos in zip(q, q_positions, strict=True):
        visible = [j for j, k_pos in enumerate(k_positions) if not causal or k_pos <= q_pos]
        scores = [scale * _dot(query, keys[j]) for j in visible]
        row_lse = logsumexp(scores)
        if row_lse == -math.inf:
            out.append([0.0] * head_dim_v)
            lse.append(-math.inf)
            continue
        weights = [math.exp(s - row_lse) for s in scores]
        out.append(
            [
                math.fsum(w * values[j][d] for w, j in zip(weights, visible, strict=True))
                for d in range(head_dim_v)
            ]
        )
        lse.append(row_lse)
    return out, lse


def merge_partials_with_lse(partials: list[tuple[Matrix, list[float]]]) -> tuple[Matrix, list[float]]:
    """Combine per-rank ``(out_r, lse_r)`` into the full ``(out, lse)``.

    ``lse = logsumexp_r(lse_r)`` and ``out = sum_r exp(lse_r - lse) * out_r``: each rank's
    normalised output is re-weighted by its share of the total softmax mass. Ranks with
    ``lse_r = -inf`` (no visible key) contribute nothing; if every rank has ``-inf`` the
    query's output is zero and its lse ``-inf``.
    """
    if not partials:
        raise ValueError("merge_partials needs at least one partial result")
    num_q = len(partials[0][1])
    for out_r, lse_r in partials:
        if len(out_r) != num_q or len(lse_r) != num_q:
            raise ValueError("every partial must have one output row and one lse per query")
    head_dim_v = len(partials[0][0][0]) if num_q else 0

    out: Matrix = []
    lse: list[float] = []
    for i in range(num_q):
        rank_lses = [lse_r[i] for _, lse_r in partials]
        total = logsumexp(rank_lses)
        if total == -math.inf:
            out.append([0.0] * head_dim_v)
            lse.append(-math.inf)
            continue
        contributing = [
            (out_r[i], math.exp(lse_r[i] - total)) for out_r, lse_r in partials if lse_r[i] != -math.inf
        ]
        out.append([math.fsum(w * row[d] for row, w in contributing) for d in range(head_dim_v)])
        lse.append(total)
    return out, lse


def merge_partials(partials: list[tuple[Matrix, list[float]]]) -> Matrix:
    """The merged output only; see ``merge_partials_with_lse``."""
    return merge_partials_with_lse(partials)[0]
