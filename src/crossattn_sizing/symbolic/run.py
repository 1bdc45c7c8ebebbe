"""One policy proved symbolically over every shape: proved for all configs, a replayed model, or not run.

The verdict rules (docs/reporting.md, "prove --symbolic"): "holds" only when
every shape's obligation is unsat on every path; "fails" only when the
solver's model, replayed through ``check`` on the concrete code, falls short
there too. Everything else is "not run" with the reason: code the evaluator
could not read (naming the line), a solver that gave no answer, or a model the
concrete code holds on (both results shown: the symbolic reading is wrong).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crossattn_sizing.base.errors import HarnessError, JudgedFailure
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.core.check_line import check_line
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.policies import Policy, checked_widths
from crossattn_sizing.symbolic.encoding import Encoding
from crossattn_sizing.symbolic.obligation import PathWidths, discharge
from crossattn_sizing.symbolic.replay import model_config, replay
from crossattn_sizing.symbolic.terms import SHAPES, ConfigTerms, Shape, config_terms


class NotProvable(Exception):
    """The symbolic widths could not be formed; the message names what was not read and where."""


PathsOf = Callable[[Encoding, ConfigTerms], list[PathWidths]]
"""How a policy's widths become terms: its paths over one shape's config (raises NotProvable)."""


@dataclass(frozen=True)
class SymbolicResult:
    """The answer of ``prove --symbolic`` for one policy."""

    policy: str
    outcome: Outcome
    detail: str
    seconds: float
    paths: int = 0
    config: RunnerConfig | None = None
    encoder_len: int | None = None
    shortfalls: tuple[str, ...] = ()
    replay_line: str = ""
    shapes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def proved(self) -> bool:
        """Whether coverage was proved for all configs."""
        return self.outcome is Outcome.HOLDS

    def to_dict(self) -> dict[str, Any]:
        """The result for ``--json``."""
        out: dict[str, Any] = {
            "policy": self.policy, "verdict": self.outcome.value, "proved_for_all_configs": self.proved,
            "detail": self.detail, "seconds": round(self.seconds, 3), "paths": self.paths,
            "shapes": list(self.shapes),
        }  # fmt: skip
        if self.config is not None:
            out |= {"model": self.config.to_dict(), "encoder_len": self.encoder_len,
                    "check": list(self.shortfalls), "replay": self.replay_line}  # fmt: skip
        return out


def prove_symbolic(spec: str, concrete: Policy, paths_of: PathsOf,
                   shapes: tuple[Shape, ...] = SHAPES) -> SymbolicResult:  # fmt: skip
    """Prove ``spec``'s coverage for all configs of every shape; replay any model through ``concrete``."""
    start = time.perf_counter()
    total_paths = 0
    shown = tuple(s.describe() for s in shapes)

    def result(outcome: Outcome, detail: str, **more: Any) -> SymbolicResult:
        return SymbolicResult(spec, outcome, detail, time.perf_counter() - start, total_paths,
                              shapes=shown, **more)  # fmt: skip

    for shape in shapes:
        enc = Encoding()
        cfg = config_terms(shape)
        try:
            paths = paths_of(enc, cfg)
        except NotProvable as exc:
            return result(Outcome.NOT_RUN, f"shape {shape.describe()}: {exc}")
        total_paths += len(paths)
        answer = discharge(Encoding(prefix="v"), cfg, paths)
        if answer.kind == "proved":
            continue
        if answer.kind == "unknown":
            return result(Outcome.NOT_RUN, f"shape {shape.describe()}: {answer.reason}")
        config, e = model_config(cfg, answer.model)
        line = check_line(spec, config, [e])
        taken = "; ".join(answer.path.taken) if answer.path and answer.path.taken else "its only path"
        claim = f"the solver's model (shape {shape.describe()}, {taken}): {config.describe()}, e={e}"
        try:
            found = replay(concrete, config, e)
        except (HarnessError, JudgedFailure) as exc:
            return result(Outcome.NOT_RUN, f"{claim}; replaying it through check did not run: {exc}",
                          config=config, encoder_len=e, replay_line=line)  # fmt: skip
        if not found:
            widths = _widths(concrete, config)
            return result(
                Outcome.NOT_RUN,
                f"{claim} falls short symbolically, but check holds on it (concrete widths {widths}): "
                "the symbolic reading is wrong, so no verdict",
                config=config, encoder_len=e, replay_line=line,
            )  # fmt: skip
        return result(Outcome.FAILS, claim, config=config, encoder_len=e,
                      shortfalls=tuple(v.explain() for v in found), replay_line=line)  # fmt: skip
    return result(Outcome.HOLDS, f"proved for all configs ({len(shapes)} shapes, {total_paths} paths)")


def _widths(policy: Policy, config: RunnerConfig) -> str:
    try:
        return str(checked_widths(policy, config))
    except (HarnessError, JudgedFailure) as exc:
        return f"not read: {exc}"
