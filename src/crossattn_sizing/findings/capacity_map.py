"""The capacity map: which (max_model_len, encoder tokens) pairs a policy's cross rows cover.

Why a picture: the verdict table says *that* the pre-fix sizing fails; the
map shows *where*. Each panel is one policy at one block size: the plane of
``M`` (x) against the encoder tokens of a request (y), with the scheduler's
budgets set to the least that admits the request (``B = E = max(M, e)``,
docs/spec.md §4) and no ``max_source_positions`` (the Nemotron-Parse case).
A cell is *covered* when the cross-attention row has a column for every
token and receives no more ids than it holds (:func:`capacity.cross_overflow`),
else *overflow*. Real models are marked, each judged with its own config
(Whisper with its ``S = 1500``), filled by their own verdict.

:func:`plane` computes the grid (no matplotlib needed; tests read it as
numbers); :func:`draw` renders panels side by side into a PNG or SVG.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from crossattn_sizing.base.errors import HarnessError, OptionError
from crossattn_sizing.core import known_configs
from crossattn_sizing.core.capacity import cross_overflow
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.policies import Policy, checked_widths

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = (".png", ".svg")
LOW, HIGH = 128, 16_384
"""The plane's range on both axes (log scale): every known model fits with room."""
STEPS = 160


@dataclass(frozen=True)
class Marker:
    """A real model's point on the plane, judged with its own config; ``offset`` places its label (points)."""

    label: str
    config: RunnerConfig
    encoder_len: int
    offset: tuple[int, int] = (8, 4)


MARKERS: tuple[Marker, ...] = (
    Marker("Nemotron-Parse page, M=2048", known_configs.nemotron_parse(), known_configs.NEMOTRON_PAGE_TOKENS,
           (-175, 12)),
    Marker("Nemotron-Parse, M=9000 (default)", known_configs.encoder_decoder(9000, 9000, None),
           known_configs.NEMOTRON_PAGE_TOKENS, (-150, -20)),
    Marker("Whisper (S=1500)", known_configs.whisper(), known_configs.WHISPER_FRAMES, (-40, 12)),
    Marker("BART, M=1024", known_configs.encoder_decoder(1024, 1024, None), known_configs.BART_POSITIONS,
           (8, -12)),
    Marker("BART, M=512", known_configs.encoder_decoder(512, 1024, None), known_configs.BART_POSITIONS,
           (-30, -20)),
)  # fmt: skip


def config_at(max_model_len: int, encoder_len: int, block_size: int) -> RunnerConfig:
    """The plane's config at one point: the least budgets that admit the request, no ``S``."""
    budget = max(max_model_len, encoder_len)
    return RunnerConfig(
        max_model_len=max_model_len,
        max_num_batched_tokens=budget,
        max_num_encoder_input_tokens=budget,
        groups=known_configs.encoder_decoder_groups(block_size),
    )


def covers(policy: Policy, config: RunnerConfig, encoder_len: int) -> bool:
    """Whether ``policy``'s cross rows hold ``encoder_len`` under ``config``: one pixel of the map."""
    return cross_overflow(checked_widths(policy, config), config, encoder_len) is None


def axis(steps: int = STEPS) -> np.ndarray:
    """Token counts spaced evenly on a log scale from :data:`LOW` to :data:`HIGH`."""
    return np.unique(np.geomspace(LOW, HIGH, steps).round().astype(int))


def plane(policy: Policy, block_size: int, steps: int = STEPS) -> np.ndarray:
    """``covered[i, j]``: whether encoder length ``axis[i]`` at ``max_model_len = axis[j]`` is covered."""
    values = axis(steps)
    out = np.zeros((len(values), len(values)), dtype=bool)
    for j, m in enumerate(values):
        for i, e in enumerate(values):
            out[i, j] = covers(policy, config_at(int(m), int(e), block_size), int(e))
    return out


def check_out(path: Path) -> None:
    """An output the map can be written as: ``.png`` or ``.svg``."""
    if path.suffix.lower() not in FORMATS:
        raise OptionError("--out", path, f"must end in {' or '.join(FORMATS)}")


def require_matplotlib() -> None:
    """Refuse early, naming the extra, when matplotlib (the ``map`` extra) is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise HarnessError(
            "the capacity map needs matplotlib: pip install 'crossattn-sizing[map]'"
        ) from None


def draw(panels: Sequence[tuple[str, Policy, int]], out: Path, steps: int = STEPS) -> None:
    """One panel per ``(name, policy, block size)``, side by side (block sizes in rows), into ``out``."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    names = list(dict.fromkeys(p[0] for p in panels))
    sizes = list(dict.fromkeys(p[2] for p in panels))
    # Wide enough for the title and legend when there is one panel.
    fig, axes = plt.subplots(len(sizes), len(names), figsize=(max(6.4 * len(names), 9.0), 5.8 * len(sizes)),
                             squeeze=False)  # fmt: skip
    colours = ListedColormap(["#e4572e", "#a8d5a2"])  # overflow, covered
    values = axis(steps)
    edges = np.sqrt(values[:-1] * values[1:])
    edges = np.concatenate([[values[0]], edges, [values[-1]]])
    for name, policy, bs in panels:
        ax = axes[sizes.index(bs)][names.index(name)]
        grid = plane(policy, bs, steps)
        ax.pcolormesh(edges, edges, grid.astype(int), cmap=colours, vmin=0, vmax=1, shading="flat")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.plot([LOW, HIGH], [LOW, HIGH], color="black", lw=0.8, ls="--")
        share = 100.0 * (1 - grid.mean())
        ax.set_title(f"{name}, block size {bs}: overflow in {share:.0f}% of the plane", fontsize=12)
        for marker in MARKERS:
            ok = covers(policy, marker.config, marker.encoder_len)
            x, y = marker.config.max_model_len, marker.encoder_len
            ax.plot(x, y, marker="o", ms=9, mec="black", mfc="white" if ok else "black", zorder=3)
            ax.annotate(f"{marker.label}{'' if ok else ': OVERFLOW'}", (x, y), xytext=marker.offset,
                        textcoords="offset points", fontsize=8.5, fontweight="normal" if ok else "bold",
                        bbox={"boxstyle": "round,pad=0.2", "fc": "white", "alpha": 0.85,
                              "lw": 0})  # fmt: skip
        ax.set_xlim(LOW, HIGH)
        ax.set_ylim(LOW, HIGH)
        ax.set_xlabel("max_model_len M (tokens, log scale)")
        ax.set_ylabel("encoder tokens of one request (log scale)")
    legend = [Patch(color="#a8d5a2", label="covered: every encoder token has a column"),
              Patch(color="#e4572e", label="overflow: tokens without a column (spill into the next row)")]
    fig.legend(handles=legend, loc="lower center", ncol=2 if len(names) > 1 else 1, frameon=False,
               fontsize=10)  # fmt: skip
    fig.suptitle("Does the cross-attention row hold every encoder token?\n"
                 "B = E = max(M, e), no max_source_positions; dashed line: e = M\n"
                 "dots: real models with their own config (white covered, black overflow)",
                 fontsize=11)  # fmt: skip
    fig.tight_layout(rect=(0, 0.08, 1, 0.9))
    save(fig, out)


def save(fig: Figure, out: Path) -> None:
    """Write ``fig`` to ``out`` and close it; a path that cannot be written is ``--out``'s error."""
    import matplotlib.pyplot as plt

    try:
        fig.savefig(out, dpi=110)
    except OSError as exc:
        raise OptionError("--out", out, f"cannot be written ({exc.strerror or type(exc).__name__})") from None
    finally:
        plt.close(fig)
