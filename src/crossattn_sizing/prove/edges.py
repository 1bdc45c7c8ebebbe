"""The default ``prove`` domain: dense around every width edge, out to long contexts.

Why not a plain grid: a row width changes only where a length crosses a
multiple of a *unit* (the kernel block ``kbs*C``, the manager block ``bs*C``,
the aligned span ``bs*C*a``), and off-by-one slips fail only one token past
such a multiple. A step grid lands on those points by luck; this domain puts
every one of the first :data:`DENSE_MULTIPLES` multiples of every unit there,
plus and minus one token, then two multiples per octave out to
:data:`MAX_TOKENS` (2M tokens, past the 1M-token contexts engines serve).

The domain is a union of small products, one per block size and DCP size, so
each part's encoder axis holds the edges of its own units only (a single
product over every block size would multiply them all together). Per part:

* shapes ``(bs, kbs, C, I=1)``: ``kbs = bs`` and a smaller kernel block
  (:func:`kernel_sizes`); the width formulas never read ``I``;
* ``E``: the edges of the part's units, the log grid ``2**j - 1 .. 2**j + 1``
  and lengths people configure, each plus or minus one;
* ``M``: powers of two and one more, three halves of them, and lengths
  people configure (:data:`MODEL_LENS`);
* ``S``: absent, 0, and the values real configs carry (:data:`SOURCE_POSITIONS`).

Every config sets ``E`` and takes ``B = max(M, E)`` (see :mod:`crossattn_sizing.prove.domain`):
a policy's branch on ``E`` being unset is the property suite's to find.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from crossattn_sizing.core.policies import alignment_multiple
from crossattn_sizing.prove.domain import ABSENT, Domain, GroupTable

MAX_TOKENS = 1 << 21
DENSE_MULTIPLES = 8
BLOCK_SIZES = (16, 32, 48, 64, 96, 128, 256, 512)
DCP_SIZES = (1, 2, 4)
FAMOUS = (448, 1024, 1500, 2048, 3201, 3328, 3329, 4096, 8192, 9000, 32768, 131072, 1 << 20)
MODEL_LENS = tuple(
    sorted(
        {v for j in range(4, 22) for v in (1 << j, (1 << j) + 1, 3 << (j - 1))}
        | {448, 1500, 2048, 3328, 9000}
    )
)
SOURCE_POSITIONS = (ABSENT, 0, 448, 1500, 4096, 1 << 20)


def kernel_sizes(bs: int) -> tuple[int, ...]:
    """``bs`` itself and one smaller kernel block (16, or half of ``bs`` when 16 does not fit)."""
    small = 16 if bs > 16 and bs % 16 == 0 else bs // 2
    return (bs, small) if small >= 1 and bs % small == 0 and small != bs else (bs,)


def alignment_multiples(bs: int) -> tuple[int, ...]:
    """:func:`~crossattn_sizing.core.policies.alignment_multiple` of ``bs`` under each rule an engine
    used: v0.34's ``gcd`` and v0.21-0.25's ``pow2``."""
    return tuple(sorted({alignment_multiple(bs, "gcd"), alignment_multiple(bs, "pow2")}))


def units(bs: int, dcp_size: int) -> tuple[int, ...]:
    """Token spans whose multiples are width edges for block size ``bs`` under ``C = dcp_size``."""
    out = {k * dcp_size for k in kernel_sizes(bs)} | {bs * dcp_size * a for a in alignment_multiples(bs)}
    return tuple(sorted(out))


def multiples(u: int, limit: int = MAX_TOKENS) -> np.ndarray:
    """``k`` for the edges of ``u``: 1 .. DENSE_MULTIPLES, then ``2**j`` and ``3 * 2**(j-1)``."""
    ks = set(range(1, DENSE_MULTIPLES + 1))
    j = DENSE_MULTIPLES.bit_length()
    while (1 << j) * u <= limit:
        ks.update((1 << j, 3 << (j - 1)))
        j += 1
    return np.array(sorted(k for k in ks if k * u <= limit), dtype=np.int64)


def edges(u: int, limit: int = MAX_TOKENS) -> np.ndarray:
    """Every ``k*u - 1, k*u, k*u + 1`` for :func:`multiples` ``k``, within ``1 .. limit``."""
    base = multiples(u, limit) * u
    out = np.concatenate([base - 1, base, base + 1])
    return np.unique(out[(out >= 1) & (out <= limit)])


def encoder_axis(bs: int, dcp_size: int) -> np.ndarray:
    """``E`` values of one part: its units' edges, the log grid and configured lengths, plus or minus one."""
    grid = np.array([1 << j for j in range(22) if 1 << j <= MAX_TOKENS] + list(FAMOUS), dtype=np.int64)
    near = np.concatenate([grid - 1, grid, grid + 1])
    parts = [edges(u) for u in units(bs, dcp_size)] + [near[(near >= 1) & (near <= MAX_TOKENS)]]
    return np.unique(np.concatenate(parts))


def shapes(bs: int, dcp_size: int) -> GroupTable:
    """The group shapes ``prove`` sweeps at block size ``bs`` and DCP size ``dcp_size``, kbs ascending."""
    kbs = np.array(kernel_sizes(bs), dtype=np.int64)
    order = np.argsort(kbs)
    kbs = kbs[order]
    ones = np.ones_like(kbs)
    return GroupTable(np.full_like(kbs, bs), kbs, np.full_like(kbs, dcp_size), ones)


def edge_domain(
    block_sizes: tuple[int, ...] = BLOCK_SIZES, dcp_sizes: tuple[int, ...] = DCP_SIZES
) -> list[Domain]:
    """The parts of the default domain, one per ``(bs, C)``, in canonical order."""
    parts = []
    for bs in block_sizes:
        for c in dcp_sizes:
            e = encoder_axis(bs, c)
            parts.append(
                Domain(
                    block_sizes=np.array([bs], dtype=np.int64),
                    dcp_sizes=np.array([c], dtype=np.int64),
                    max_model_lens=np.array(MODEL_LENS, dtype=np.int64),
                    encoder_budgets=e,
                    source_positions=np.array(SOURCE_POSITIONS, dtype=np.int64),
                    specs={"domain": f"edges bs={bs} C={c}"},
                    shapes=shapes(bs, c),
                )
            )
    return parts


@dataclass(frozen=True)
class EdgeCoverage:
    """How many width edges of the domain's units its encoder axes hold.

    ``dense_edges``: edges of the first :data:`DENSE_MULTIPLES` multiples of
    every unit (all in the domain, by construction, and counted here); ``all_edges``: every
    ``k*u +- 1`` up to :data:`MAX_TOKENS` for every unit, of which the domain
    checks ``checked`` (two multiples per octave past the dense ones). These count the
    edges the domain puts under check, not a verdict on them: the line says "checked".
    """

    units: int
    dense_edges: int
    dense_checked: int
    all_edges: int
    checked: int

    def describe(self) -> str:
        """The coverage of the edges as one line of ``prove``'s report."""
        return (
            f"{self.units} (unit, part) pairs; edges of the first {DENSE_MULTIPLES} multiples of each: "
            f"{self.dense_checked:,} of {self.dense_edges:,} checked; all edges k*unit-1..k*unit+1 up to "
            f"{MAX_TOKENS:,} tokens: {self.checked:,} of {self.all_edges:,} checked "
            f"({100 * self.checked / max(1, self.all_edges):.2f}%, two multiples per octave past the "
            f"first {DENSE_MULTIPLES})"
        )


def edge_coverage(parts: list[Domain]) -> EdgeCoverage:
    """Count the edges each part's encoder axis holds, against every edge of its units."""
    n_units = dense = dense_checked = total = checked = 0
    for part in parts:
        axis = part.encoder_budgets
        bs, c = int(part.block_sizes[0]), int(part.dcp_sizes[0])
        for u in units(bs, c):
            n_units += 1
            k_max = MAX_TOKENS // u
            total += 3 * k_max - (1 if k_max * u + 1 > MAX_TOKENS else 0)
            ks = np.arange(1, min(DENSE_MULTIPLES, k_max) + 1, dtype=np.int64) * u
            first = np.concatenate([ks - 1, ks, ks + 1])
            first = first[(first >= 1) & (first <= MAX_TOKENS)]
            dense += first.size
            dense_checked += int(np.isin(first, axis).sum())
            on_edge = axis[(axis % u <= 1) | (axis % u == u - 1)]
            checked += int(on_edge.size)
    return EdgeCoverage(n_units, dense, dense_checked, total, checked)
