"""Assertions of the implementation properties, written to read as a diagnosis when they fail.

A slot mismatch names the group, rank, request, position and both slots. An
output mismatch names the policy, mode and widths, then for each request the
tokens that had no column, the row entries another request overwrote, and the
largest error against the tolerance of the dtype (table below), so a failure
under the pre-fix sizing shows *what the bug does to outputs*, not a crash.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NoReturn

import torch

from crossattn_sizing.base.errors import CapacityError

from .failures import fail_rerun, judge_against


@dataclass(frozen=True)
class Tolerance:
    """``|got - expected| <= atol + rtol * |expected|``, elementwise, with why these numbers."""

    rtol: float
    atol: float
    reason: str


# The reference computes in float64 from the same dtype-rounded inputs, so the
# only error is the implementation's fp32 accumulation and the final rounding
# of the output to the cache dtype. Both bounds are stated with their margin.
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(
        rtol=1e-4,
        atol=5e-5,
        reason="fp32 accumulation over <= a few thousand keys: ~sqrt(L)*2^-24*max|v| <= 1e-5 "
        "at L=3329, |v|<=4; 5x margin. One misplaced key among <= 700 moves the output by >~1e-3.",
    ),
    torch.float16: Tolerance(
        rtol=2e-3,
        atol=1e-4,
        reason="output rounded to fp16 (unit roundoff 2^-11 = 4.9e-4 relative) after fp32 "
        "accumulation; 4x margin, atol for outputs near 0",
    ),
    torch.bfloat16: Tolerance(
        rtol=8e-3,
        atol=1e-3,
        reason="output rounded to bf16 (unit roundoff 2^-9 = 2.0e-3 relative) after fp32 "
        "accumulation; 4x margin, atol for outputs near 0",
    ),
}


def tolerance(dtype: torch.dtype) -> Tolerance:
    """The tolerance row for ``dtype``."""
    return TOLERANCES[dtype]


FP32_EPS = 2.0**-24
MASS_MARGIN = 4.0
MASS_REASON = (
    "plus, where scores and values are large, {margin:g} x 2^-24 x ({keys} keys + 2 x {score:.4g}) x "
    "sum_i p_i|v_i|: the kernel computes in fp32 whatever the dtype, so a weighted sum of n values "
    "is off by at most n ulps of sum p|v| (values cancel, so not of |output|), and each score "
    "q.k*scale by ~2 ulps of sum_d |q_d k_d| * scale (bounded by {score:.4g}), which moves the "
    "softmax weights by that much relative; 4x margin"
)


def mass_bound(mass: torch.Tensor, score_abs: float, num_keys: int) -> torch.Tensor:
    """The fp32 error bound that scales with ``sum_i p_i |v_i|`` (see :data:`MASS_REASON`)."""
    return MASS_MARGIN * FP32_EPS * (num_keys + 2.0 * score_abs) * mass


def spans(values: Sequence[int]) -> str:
    """``[1,2,3,7,9,10]`` as ``1..3, 7, 9..10`` (sorted, compact, for messages)."""
    items = sorted(set(values))
    if not items:
        return "none"
    out: list[str] = []
    start = prev = items[0]
    for x in items[1:]:
        if x == prev + 1:
            prev = x
            continue
        out.append(f"{start}..{prev}" if prev > start else str(start))
        start = prev = x
    out.append(f"{start}..{prev}" if prev > start else str(start))
    return ", ".join(out)


# Slots ------------------------------------------------------------------------------


def assert_slots_equal(
    got: Sequence[int],
    expected: Sequence[int],
    tokens: Sequence[tuple[int, int, int]],
    header: Sequence[str],
    options: Sequence[str] = (),
) -> None:
    """Slots equal the reference's token for token, padding included.

    ``tokens[t]`` is ``(request index, row, position)`` for live token ``t``;
    entries past ``len(tokens)`` are padding and must be -1. ``options`` are
    the harness options of the run, for the line that reruns it.
    """
    if len(got) != len(expected):
        fail_rerun([*header, f"  got {len(got)} slots, expected {len(expected)}"], options)
    wrong = [t for t, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b]
    if not wrong:
        return
    lines = [*header, f"  {len(wrong)} of {len(got)} slots differ from the reference:"]
    for t in wrong[:8]:
        if t < len(tokens):
            req, row, pos = tokens[t]
            where = f"token {t} (request {req}, row {row}, position {pos})"
        else:
            where = f"padding entry {t}"
        lines.append(f"    {where}: got {got[t]}, expected {expected[t]}")
    if len(wrong) > 8:
        lines.append(f"    ... and {len(wrong) - 8} more")
    fail_rerun(lines, options)


# Outputs ----------------------------------------------------------------------------


@dataclass
class RequestReport:
    """What a message says about one request of a scenario."""

    index: int
    row: int
    num_tokens: int
    tokens_per_entry: int
    width: int
    entries_given: list[int] = field(default_factory=list)
    entries_read: list[int] = field(default_factory=list)

    @property
    def needed(self) -> int:
        """Table entries the request's tokens need: ``ceil(tokens / tokens_per_entry)``."""
        return -(-self.num_tokens // self.tokens_per_entry)

    @property
    def uncovered(self) -> range:
        """Token positions whose column lies past the row's width."""
        return range(min(self.width * self.tokens_per_entry, self.num_tokens), self.num_tokens)

    def overwritten(self) -> list[int]:
        """Columns whose entry is no longer the id this request was given."""
        return [
            c
            for c, (a, b) in enumerate(zip(self.entries_given, self.entries_read, strict=False))
            if a != b
        ]

    def describe(self) -> str:
        """The request's shortfall as one line for the failure message, with the tokens left uncovered."""
        tokens = f"{self.num_tokens} token" + ("" if self.num_tokens == 1 else "s")
        entries = f"{self.needed} entr" + ("y" if self.needed == 1 else "ies")
        verb = "needs" if self.num_tokens == 1 else "need"
        head = f"request {self.index} (row {self.row}): {tokens} {verb} {entries}, the row holds {self.width}"
        if self.uncovered:
            head += (
                f"; tokens {spans(self.uncovered)} ({len(self.uncovered)} of {self.num_tokens}) "
                "had no column"
            )
        lost = self.overwritten()
        if lost:
            which = f"entry {spans(lost)} of its row now holds" if len(lost) == 1 else (
                f"entries {spans(lost)} of its row now hold"
            )
            head += f"; {which} another request's ids"
        return head


SHOWN_ELEMENTS = 4
"""Differing elements a failure lists (index, got, expected): enough to see the pattern, bounded whatever
the tensor's size. A tensor is shown by its shape, its dtype and these, never by its values whole."""


def differing_elements(got: torch.Tensor, expected: torch.Tensor, bad: torch.Tensor,
                       limit: int = SHOWN_ELEMENTS) -> str:  # fmt: skip
    """One line of bounded length: the output's shape and dtype, how many of its elements differ
    (``bad``), and the first ``limit`` of them with both values."""
    where = [tuple(int(i) for i in index) for index in bad.nonzero()[:limit]]
    shown = "; ".join(
        f"[{', '.join(map(str, index))}] got {float(got[index]):.6g}, expected {float(expected[index]):.6g}"
        for index in where
    )
    count = int(bad.sum())
    dtype = str(got.dtype).removeprefix("torch.")
    return (f"output shape {list(got.shape)}, dtype {dtype}: {count} of {bad.numel()} elements differ; "
            f"the first {len(where)}: {shown}")  # fmt: skip


def assert_outputs_match(
    got: torch.Tensor,
    expected: torch.Tensor,
    query_owner: Sequence[int],
    query_position: Sequence[int],
    requests: Sequence[RequestReport],
    header: Sequence[str],
    dtype: torch.dtype,
    mass: torch.Tensor | None = None,
    score_abs: float = 0.0,
    num_keys: int = 0,
    options: Sequence[str] = (),
) -> None:
    """The implementation's output equals the float64 reference within the dtype's tolerance.

    With ``mass`` (``sum_i p_i |v_i|`` per element), the bound also grows with
    the fp32 rounding of large, cancelling values and scores (:func:`mass_bound`).
    A NaN or inf anywhere fails too: cells a request does not own are poisoned
    with NaN, so a non-finite output means one was read, and a softmax that
    overflows shows as one.
    """
    judge_against(expected.flatten().tolist(), "the reference (dense attention in float64)")
    if tuple(got.shape) != tuple(expected.shape):
        dtype_name = str(got.dtype).removeprefix("torch.")
        fail_rerun([*header, f"  output shape {list(got.shape)}, dtype {dtype_name}: the reference's is "
                             f"{list(expected.shape)}"], options)  # fmt: skip
    tol = tolerance(dtype)
    got64 = got.detach().to("cpu", torch.float64)
    exp64 = expected.to(torch.float64)
    err = (got64 - exp64).abs()
    finite = torch.isfinite(got64)
    bound = tol.atol + tol.rtol * exp64.abs()
    if mass is not None:
        bound = bound + mass_bound(mass.to(torch.float64), score_abs, num_keys)
    bad = ~finite | (err > bound)
    if not bool(bad.any()):
        return
    err_shown = torch.where(finite, err, torch.full_like(err, math.inf))
    lines = [
        *header,
        f"  tolerance ({str(dtype).removeprefix('torch.')}): rtol={tol.rtol:g} atol={tol.atol:g} "
        f"({tol.reason})",
    ]
    if mass is not None:
        lines.append("    " + MASS_REASON.format(margin=MASS_MARGIN, keys=num_keys, score=score_abs))
    lines.append(f"  {differing_elements(got.detach().cpu(), exp64, bad)}")
    bad_q = bad.flatten(1).any(dim=1)
    for req in requests:
        mine = [q for q, owner in enumerate(query_owner) if owner == req.index]
        wrong = [q for q in mine if bool(bad_q[q])]
        lines.append(f"  {req.describe()}")
        if not mine:
            continue
        if not wrong:
            lines.append(f"      output ok ({len(mine)} queries)")
            continue
        sub = err_shown[wrong]
        flat = int(torch.argmax(sub))
        qi, h, d = (int(x) for x in torch.unravel_index(torch.tensor(flat), sub.shape))
        q = wrong[qi]
        nonfinite = int((~finite[wrong]).sum())
        lines.append(
            f"      WRONG OUTPUT: max abs error {float(sub.max()):.4g} at query {q} (position "
            f"{query_position[q]}), head {h}, dim {d}: got {float(got64[q, h, d]):.6g}, "
            f"expected {float(exp64[q, h, d]):.6g} (bound {float(bound[wrong][qi, h, d]):.3g}); "
            f"{len(wrong)} of {len(mine)} queries wrong"
            + (f"; {nonfinite} non-finite values (a poisoned cell reached the output)" if nonfinite else "")
        )
    fail_rerun(lines, options)


def fail_refused(err: CapacityError, header: Sequence[str], options: Sequence[str] = ()) -> NoReturn:
    """Fail the property whose guarded block table refused an access, with the structured error.

    Called while handling ``err``, so the failure keeps it as its context.
    """
    fail_rerun(
        [
            *header,
            f"  the guarded block table refused an access before any kernel ran: {err}",
            f"  (group {err.group}, row {err.row}: needs {err.needed} entries, width {err.width}, "
            f"first token without a column {err.first_position}, access {err.access})",
        ],
        options,
    )
