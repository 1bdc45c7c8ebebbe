"""Dense attention and the log-sum-exp merge: hand-computed anchors and split invariance."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from reference.attention import attention, logsumexp, merge_partials, merge_partials_with_lse

from .strategies import ABS_TOL, FAST, REL_TOL, matrices, scales

# Two keys whose scaled scores are ln 3 and 0: softmax weights 3/4 and 1/4.
Q = [[1.0, 0.0]]
KEYS = [[1.0, 0.0], [0.0, 0.0]]
VALUES = [[4.0, 0.0], [0.0, 8.0]]
SCALE = math.log(3.0)


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def rows_close(a: list[list[float]], b: list[list[float]]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(close(u, v) for u, v in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True)
    )


def test_two_key_attention_by_hand() -> None:
    out, lse = attention(Q, KEYS, VALUES, SCALE)
    # out = 3/4 * [4, 0] + 1/4 * [0, 8] = [3, 2]; lse = log(3 + 1).
    assert rows_close(out, [[3.0, 2.0]])
    assert close(lse[0], math.log(4.0))


def test_causal_mask_hides_later_keys() -> None:
    out, lse = attention(Q, KEYS, VALUES, SCALE, causal=True, q_positions=[0], k_positions=[0, 1])
    assert rows_close(out, [[4.0, 0.0]])
    assert close(lse[0], math.log(3.0))


def test_a_query_with_no_visible_key_gives_zeros_and_minus_inf() -> None:
    out, lse = attention(Q, KEYS, VALUES, SCALE, causal=True, q_positions=[0], k_positions=[1, 2])
    assert out == [[0.0, 0.0]] and lse == [-math.inf]
    out, lse = attention(Q, [], [], SCALE)
    assert out == [[0.0, 0.0]] and lse == [-math.inf]


def test_merge_of_the_two_single_key_halves_by_hand() -> None:
    first = attention(Q, KEYS[:1], VALUES[:1], SCALE)  # out [4, 0], lse ln 3
    second = attention(Q, KEYS[1:], VALUES[1:], SCALE)  # out [0, 8], lse 0
    empty = ([[0.0, 0.0]], [-math.inf])
    out, lse = merge_partials_with_lse([first, empty, second])
    assert rows_close(out, [[3.0, 2.0]])
    assert close(lse[0], math.log(4.0))
    assert merge_partials([empty, empty]) == [[0.0, 0.0]]


def test_softmax_is_stable_for_large_scores() -> None:
    out, lse = attention([[1000.0]], [[1.0], [1.0]], [[1.0], [3.0]], 1.0)
    assert rows_close(out, [[2.0]])
    assert close(lse[0], 1000.0 + math.log(2.0))


def test_nan_propagates_from_visible_keys_only() -> None:
    poisoned = [[math.nan, math.nan], [0.0, 0.0]]
    out, _ = attention(Q, poisoned, VALUES, SCALE)
    assert all(math.isnan(x) for x in out[0])
    out, _ = attention(Q, poisoned, VALUES, SCALE, causal=True, q_positions=[1], k_positions=[2, 0])
    assert rows_close(out, [[0.0, 8.0]])
    assert math.isnan(logsumexp([0.0, math.nan])) and logsumexp([]) == -math.inf


@st.composite
def problems(draw: st.DrawFn) -> tuple:
    dim = draw(st.integers(1, 3))
    num_q = draw(st.integers(1, 3))
    num_k = draw(st.integers(0, 8))
    q = draw(matrices(num_q, dim))
    keys = draw(matrices(num_k, dim))
    values = draw(matrices(num_k, dim))
    dcp_size = draw(st.integers(1, 4))
    owner = draw(st.lists(st.integers(0, dcp_size - 1), min_size=num_k, max_size=num_k))
    return q, keys, values, dcp_size, owner


@FAST
@given(problem=problems(), scale=scales, causal=st.booleans(), data=st.data())
def test_merging_partials_over_any_split_equals_unsharded_attention(
    problem: tuple, scale: float, causal: bool, data: st.DataObject
) -> None:
    q, keys, values, dcp_size, owner = problem
    k_positions = list(range(len(keys)))
    q_positions = data.draw(st.lists(st.integers(-1, 8), min_size=len(q), max_size=len(q)))
    full_out, full_lse = attention(
        q, keys, values, scale, causal=causal, q_positions=q_positions, k_positions=k_positions
    )
    partials = []
    for rank in range(dcp_size):
        mine = [j for j in range(len(keys)) if owner[j] == rank]
        partials.append(
            attention(
                q,
                [keys[j] for j in mine],
                [values[j] for j in mine],
                scale,
                causal=causal,
                q_positions=q_positions,
                k_positions=mine,
                head_dim_v=len(q[0]),
            )
        )
    out, lse = merge_partials_with_lse(partials)
    assert rows_close(out, full_out)
    assert all((a == b == -math.inf) or close(a, b) for a, b in zip(lse, full_lse, strict=True))


@FAST
@given(problem=problems(), scale=scales)
def test_outputs_lie_within_the_range_of_the_values(problem: tuple, scale: float) -> None:
    q, keys, values, _, _ = problem
    out, _ = attention(q, keys, values, scale, head_dim_v=len(q[0]))
    for row in out:
        for d, x in enumerate(row):
            column = [v[d] for v in values] or [0.0]
            assert min(column) - ABS_TOL <= x <= max(column) + ABS_TOL
