"""SGLang's read-side plane: one request's encoder tokens against the longest decoder in its batch.

On SGLang's shared row (``[E | d]``, ``context_len + 4`` wide) the FA3 decode
gather reads ``E_i + arange(max_j d_j)`` (docs/spec.md §10). The plane fixes
the server (``context_len``, a KV pool as large as the context) and puts,
for a request with ``E`` encoder tokens and a one-token prompt at its first
decode step (x), a text-only neighbour decoding ``d`` tokens (y). A cell is
*inadmissible* when either request alone would be refused, *overflow* when the
gather (:func:`~crossattn_sizing.core.read_gather.sglang_fa3_gather`, the
harness's model of the release's) indexes past the row, else *fits*. Marked
batches are judged by the release's own code through its worker; a marker
whose verdict differs from the model's cell says so.

:func:`plane` computes the grid (no matplotlib; tests read it as numbers),
:func:`draw_sglang` renders it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from crossattn_sizing.core.admission_rules import EngineRequest, SglangAdmission, admitted
from crossattn_sizing.core.layouts import SharedRow
from crossattn_sizing.core.read_gather import BatchRequest, sglang_fa3_gather
from crossattn_sizing.findings.capacity_map import save

INADMISSIBLE, OVERFLOW, FITS = 0, 1, 2
STEPS = 120


def cell(context_len: int, encoder_len: int, neighbour_decoder: int) -> int:
    """The state of one point: request A (``E``, prompt 1, ``d = 2``) beside a text-only ``d``."""
    rule, row = SglangAdmission(context_len, context_len), SharedRow(context_len)
    a = EngineRequest(encoder_len, 1, 1)
    b = EngineRequest(0, max(1, neighbour_decoder - 1), 1)
    if not (admitted(rule, a) and admitted(rule, b) and rule.output_cap(a) >= 1 and rule.output_cap(b) >= 1):
        return INADMISSIBLE
    batch = [BatchRequest(encoder_len, 2), BatchRequest(0, neighbour_decoder)]
    stop = max(g.columns.stop for g in sglang_fa3_gather(batch))
    return OVERFLOW if stop > row.width else FITS


def axis(context_len: int, steps: int = STEPS) -> np.ndarray:
    """Token counts from 1 to ``context_len``, evenly spaced."""
    return np.unique(np.linspace(1, context_len, steps).round().astype(int))


def plane(context_len: int, steps: int = STEPS) -> np.ndarray:
    """``state[i, j]`` for encoder tokens ``axis[j]`` (x) and neighbour decoder ``axis[i]`` (y)."""
    values = axis(context_len, steps)
    return np.array([[cell(context_len, int(e), int(d)) for e in values] for d in values], dtype=int)


def draw_sglang(spec: str, context_len: int, markers: list[tuple[str, int, int, str]], out: Path) -> None:
    """The plane at ``context_len``, markers ``(label, E, neighbour d, release verdict)``, into ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    values = axis(context_len)
    grid = plane(context_len)
    fig, ax = plt.subplots(figsize=(8.5, 7.0))
    ax.pcolormesh(
        values,
        values,
        grid,
        cmap=ListedColormap(["#d9d9d9", "#e4572e", "#a8d5a2"]),
        vmin=0,
        vmax=2,
        shading="nearest",
    )
    for label, e, d, verdict in markers:
        bad = verdict != "holds"
        ax.plot(e, d, marker="o", ms=9, mec="black", mfc="black" if bad else "white", zorder=3)
        ax.annotate(
            f"{label}: {spec} {verdict}",
            (e, d),
            xytext=(8, 6),
            textcoords="offset points",
            fontsize=8.5,
            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "alpha": 0.85, "lw": 0},
        )
    ax.set_xlabel("encoder tokens E of one request (prompt 1, first decode step)")
    ax.set_ylabel("longest decoder in its batch (a text-only request)")
    share = 100.0 * (grid == OVERFLOW).sum() / max(1, (grid != INADMISSIBLE).sum())
    ax.set_title(
        f"SGLang FA3 decode gather, context_len {context_len} (row {SharedRow(context_len).width}):\n"
        f"reads past the row in {share:.0f}% of the admissible plane",
        fontsize=11,
    )
    fig.legend(
        handles=[
            Patch(color="#a8d5a2", label="fits: every gathered column in the row"),
            Patch(color="#e4572e", label="overflow: the gather indexes past the row"),
            Patch(color="#d9d9d9", label="a request alone is refused by admission"),
        ],
        loc="lower center",
        ncol=3,
        frameon=False,
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save(fig, out)
