"""The symbolic config: a RunnerConfig whose integers are solver terms, with the rules that bound them.

:class:`ConfigTerms` has the attributes the harness's policies and the audit
evaluator read of a :class:`~crossattn_sizing.core.config.RunnerConfig`, each
integer a z3 ``Int``. :func:`config_rules` states what the harness enforces of
a config (``RunnerConfig.__post_init__``) and the admission bound, so a proof
is about exactly the configs the engine starts with and the requests it admits.

The group layout (which kinds, in which order) and whether the model config has
``max_source_positions`` are not integers: each :class:`Shape` is proved on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from crossattn_sizing.base.errors import HarnessError
from crossattn_sizing.base.limits import MAX_BLOCK_SIZE
from crossattn_sizing.core.config import GroupKind

Z3_MISSING = (
    "prove --symbolic needs the z3 solver, which is not installed: pip install 'crossattn-sizing[prove]'"
)


def z3_module() -> ModuleType:
    """The z3 module, or a :class:`HarnessError` of one line saying how to install it."""
    try:
        import z3
    except ImportError:
        raise HarnessError(Z3_MISSING) from None
    return z3


@dataclass(frozen=True)
class Shape:
    """What is not an integer in a config: the group kinds in order, and whether ``S`` is present."""

    kinds: tuple[GroupKind, ...]
    has_source_positions: bool

    def describe(self) -> str:
        """``[full, cross], S present`` for a report line."""
        kinds = ", ".join(k.value for k in self.kinds)
        return f"[{kinds}], S {'present' if self.has_source_positions else 'absent'}"


SHAPES = tuple(
    Shape(kinds, has_s)
    for kinds in ((GroupKind.CROSS,), (GroupKind.FULL, GroupKind.CROSS))
    for has_s in (False, True)
)
"""The shapes proved: one cross group (the bounded ``prove``'s shape) and a decoder group before it
(every encoder-decoder model the spec names), each with ``max_source_positions`` absent and present."""


@dataclass(eq=False)
class GroupTerms:
    """One KV-cache group with solver terms for its sizes; read like a :class:`KVCacheGroup`."""

    kind: GroupKind
    block_size: Any
    kernel_block_size: Any
    per_kernel: Any  # bpk: block_size == kernel_block_size * per_kernel (the divisibility rule's witness)
    dcp_sharded: bool = True

    @property
    def kbs(self) -> Any:
        """The kernel block size term."""
        return self.kernel_block_size

    @property
    def bpk(self) -> Any:
        """Kernel blocks per manager block (``block_size // kernel_block_size``, exact by the rules)."""
        return self.per_kernel


@dataclass(eq=False)
class ConfigTerms:
    """A RunnerConfig of terms: ``M, B, E, S, C, I``, each group's ``bs`` and ``kbs``, and ``e``.

    ``encoder_len`` is the encoder length of one admitted request, the
    quantity the obligation is about. Booleans and counts the sizing does not
    vary over are fixed: an encoder-decoder model, prefix caching off, no
    speculative blocks, 8 requests.
    """

    shape: Shape
    max_model_len: Any
    max_num_batched_tokens: Any
    max_num_encoder_input_tokens: Any
    max_source_positions: Any
    dcp_size: Any
    dcp_interleave: Any
    groups: tuple[GroupTerms, ...]
    encoder_len: Any
    max_num_reqs: int = 8
    is_encoder_decoder: bool = True
    prefix_caching: bool = False
    num_speculative_blocks: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def encoder_budget(self) -> Any:
        """``E``: the encoder budget term."""
        return self.max_num_encoder_input_tokens

    @property
    def source_positions(self) -> Any:
        """``S`` as the width formulas read it: 0 when absent."""
        return 0 if self.max_source_positions is None else self.max_source_positions

    def dcp_factor(self, group: GroupTerms) -> Any:
        """``C_g``: the DCP size for a sharded attention group, else 1."""
        return self.dcp_size if group.kind.is_attention and group.dcp_sharded else 1

    def describe(self) -> str:
        """What an error line names: the symbolic config of this shape."""
        return f"the symbolic config {self.shape.describe()}"

    def integers(self) -> dict[str, Any]:
        """Every integer term by the name a model's config field takes."""
        out = {
            "max_model_len": self.max_model_len,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_encoder_input_tokens": self.max_num_encoder_input_tokens,
            "dcp_size": self.dcp_size,
            "dcp_interleave": self.dcp_interleave,
            "encoder_len": self.encoder_len,
        }
        if self.max_source_positions is not None:
            out["max_source_positions"] = self.max_source_positions
        for i, g in enumerate(self.groups):
            out[f"groups[{i}].block_size"] = g.block_size
            out[f"groups[{i}].kernel_block_size"] = g.kernel_block_size
        return out


def config_terms(shape: Shape) -> ConfigTerms:
    """Fresh terms for a config of ``shape``."""
    z3 = z3_module()
    groups = tuple(
        GroupTerms(kind, z3.Int(f"bs{i}"), z3.Int(f"kbs{i}"), z3.Int(f"bpk{i}"))
        for i, kind in enumerate(shape.kinds)
    )
    return ConfigTerms(
        shape, z3.Int("M"), z3.Int("B"), z3.Int("E"),
        z3.Int("S") if shape.has_source_positions else None,
        z3.Int("C"), z3.Int("I"), groups, z3.Int("e"),
    )  # fmt: skip


def exact_quotients(cfg: ConfigTerms) -> list[tuple[Any, Any, Any]]:
    """``(x, d, q)`` with ``x == d * q`` by :func:`config_rules`: each group's ``bs // kbs == bpk``."""
    return [(g.block_size, g.kbs, g.bpk) for g in cfg.groups]


def config_rules(cfg: ConfigTerms) -> list[Any]:
    """What the harness enforces of a config, and the admission bound on ``e``.

    ``RunnerConfig.__post_init__``: every length >= 1 (``S >= 0``), ``B >= M``
    (chunked prefill off for encoder-decoder models), ``1 <= kbs``,
    ``bs <= MAX_BLOCK_SIZE``, ``kbs | bs`` and, under DCP, ``I | bs`` and
    ``I | kbs`` for sharded attention groups. Divisibility is stated with a
    fresh multiplier (``bs == kbs * k``). Admission (:mod:`~crossattn_sizing.core.admission`):
    ``1 <= e <= min(E, B)``.
    """
    z3 = z3_module()
    m, b, e_budget, c, i = (cfg.max_model_len, cfg.max_num_batched_tokens, cfg.encoder_budget,
                            cfg.dcp_size, cfg.dcp_interleave)  # fmt: skip
    rules = [m >= 1, b >= 1, e_budget >= 1, c >= 1, i >= 1, b >= m]
    if cfg.max_source_positions is not None:
        rules.append(cfg.max_source_positions >= 0)
    for n, g in enumerate(cfg.groups):
        per, ik, ib = g.bpk, z3.Int(f"i_in_kbs{n}"), z3.Int(f"i_in_bs{n}")
        rules += [g.kbs >= 1, g.block_size <= MAX_BLOCK_SIZE, per >= 1, g.block_size == g.kbs * per]
        if g.kind.is_attention and g.dcp_sharded:
            rules.append(z3.Implies(c > 1, z3.And(ik >= 1, g.kbs == i * ik, ib >= 1, g.block_size == i * ib)))
    rules += [cfg.encoder_len >= 1, cfg.encoder_len <= e_budget, cfg.encoder_len <= b]
    return rules
