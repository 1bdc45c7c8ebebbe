"""The coverage obligation, for all integers, and the solver call that discharges it.

For one path through a policy's sizing (its conditions, and one width term
per group), a violation is an admitted request whose tokens a row cannot
hold: for a cross group the encoder's ``e``, for a full or sliding-window
group the decoder's ``M`` (as :func:`crossattn_sizing.core.capacity.request_tokens`),
by coverage (``cdiv(n, kbs*C_g) > W``) or allocation fit
(``cdiv(n, bs*C_g) * bpk > W``), the two invariants ``check`` judges. The
solver is asked for one under the config rules: "unsat" on every path is the
proof; "sat" gives a model, searched first in small boxes so the model shown is
a config a person recognises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from crossattn_sizing.core.capacity import request_tokens
from crossattn_sizing.symbolic.encoding import Encoding
from crossattn_sizing.symbolic.terms import ConfigTerms, config_rules

SOLVER_TIMEOUT_MS = 20_000
"""The most one solver query may take before it answers "unknown" (a "not run", never a verdict)."""

BOXES: tuple[tuple[str, int], ...] = (("nemotron", 4096), ("small", 4096), ("medium", 2**20))
"""Where a model is looked for first, smallest first: every integer at most the bound, and for
``nemotron`` also the Nemotron-Parse shape's sizes (bs = kbs = 16, C = 1)."""


@dataclass(frozen=True)
class PathWidths:
    """One path through a sizing: the conditions it took (terms) and the width term of each group."""

    conditions: tuple[Any, ...]
    widths: tuple[Any, ...]
    taken: tuple[str, ...] = ()  # the conditions with the side taken, for reports
    side: tuple[Any, ...] = ()  # the definitions of the fresh quotients the widths use


@dataclass(frozen=True)
class Answer:
    """What the solver said: ``proved``, ``model`` (with the config's integers) or ``unknown`` (why)."""

    kind: str
    model: dict[str, int] = field(default_factory=dict)
    path: PathWidths | None = None
    reason: str = ""


STRATEGIES = (("smt", 5_000), ("QF_NIA", SOLVER_TIMEOUT_MS))
"""Solvers tried in turn on a query until one answers: z3's ``smt`` tactic settles these nonlinear
queries in tenths of a second where its default portfolio can take minutes; the logic-specific
solver gets the rest of the time where it does not."""


def check(enc: Encoding, query: list[Any]) -> tuple[Any, Any]:
    """``(verdict, solver)``: the first definite answer of :data:`STRATEGIES`, else the last "unknown"."""
    z3 = enc.z3
    for name, timeout in STRATEGIES:
        s = z3.Tactic(name).solver() if name == "smt" else z3.SolverFor(name)
        s.set("timeout", timeout)
        s.add(*query)
        verdict = s.check()
        if verdict != z3.unknown:
            break
    return verdict, s


def violations(enc: Encoding, cfg: ConfigTerms, widths: Sequence[Any]) -> list[Any]:
    """Each way a row can fall short of an admitted request's tokens: per group, coverage then allocation.

    One query each: the solver settles several small questions much faster than their disjunction.
    """
    short = []
    for group, width in zip(cfg.groups, widths, strict=True):
        tokens = request_tokens(cfg, group.kind, cfg.encoder_len)  # type: ignore[arg-type]
        if tokens is None:
            continue
        c = cfg.dcp_factor(group)
        needed = enc.cdiv(tokens, group.kbs * c, positive=True)
        received = enc.cdiv(tokens, group.block_size * c, positive=True) * group.bpk
        short += [needed > width, received > width]
    return short


def _box(enc: Encoding, cfg: ConfigTerms, name: str, bound: int) -> list[Any]:
    box = [v <= bound for v in cfg.integers().values()]
    if name == "nemotron":
        box += [cfg.dcp_size == 1, cfg.dcp_interleave == 1]
        box += [g.block_size == 16 for g in cfg.groups] + [g.kbs == 16 for g in cfg.groups]
    return box


def _model(s: Any, cfg: ConfigTerms) -> dict[str, int]:
    m = s.model()
    return {name: m.eval(term, model_completion=True).as_long() for name, term in cfg.integers().items()}


def same_paths(enc: Encoding, paths: Sequence[PathWidths]) -> list[PathWidths]:
    """Paths whose widths and definitions are the same terms, joined into one (their conditions or-ed).

    Every run names its fresh quotients in order from 1 (:class:`Encoding`), so two paths that
    computed the widths the same way (a split on something the widths never read, such as
    ``use_dcp`` choosing the DCP rank) hold the same terms, and one query serves both.
    """
    z3 = enc.z3
    joined: list[PathWidths] = []
    for path in paths:
        for n, seen in enumerate(joined):
            if _same(z3, seen.widths, path.widths) and _same(z3, seen.side, path.side):
                either = z3.Or(z3.And(*seen.conditions), z3.And(*path.conditions))
                taken = (f"({'; '.join(seen.taken)}) or ({'; '.join(path.taken)})",)
                joined[n] = PathWidths((either,), seen.widths, taken, seen.side)
                break
        else:
            joined.append(path)
    return joined


def _same(z3: Any, a: Sequence[Any], b: Sequence[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, int) or isinstance(y, int):
            if not (isinstance(x, int) and isinstance(y, int) and x == y):
                return False
        elif not z3.eq(x, y):
            return False
    return True


def discharge(enc: Encoding, cfg: ConfigTerms, paths: Sequence[PathWidths]) -> Answer:
    """Prove coverage on every path, or give the smallest model found among the paths that fall short.

    Every (path, group, invariant) is one query (paths with the same widths joined first:
    :func:`same_paths`); where several fall short, the boxes of :data:`BOXES` are tried across all
    of them, so a small Nemotron-shaped model is preferred to the first one found.
    """
    rules = config_rules(cfg)
    short_queries: list[tuple[list[Any], PathWidths, dict[str, int]]] = []
    undecided: Answer | None = None
    for path in same_paths(enc, paths):
        for short in violations(enc, cfg, path.widths):
            query = [*rules, *path.side, *path.conditions, short, *enc.side]
            verdict, s = check(enc, query)
            if verdict == enc.z3.sat:
                short_queries.append((query, path, _model(s, cfg)))
            elif verdict != enc.z3.unsat and undecided is None:
                why = f"the solver gave no answer ({s.reason_unknown()})"
                undecided = Answer("unknown", path=path, reason=why)
    if not short_queries:
        return undecided or Answer("proved")
    for name, bound in BOXES:  # a smaller model if one exists
        for query, path, _ in short_queries:
            verdict, small = check(enc, [*query, *_box(enc, cfg, name, bound)])
            if verdict == enc.z3.sat:
                return Answer("model", _model(small, cfg), path)
    _, path, found = short_queries[0]
    return Answer("model", found, path)
