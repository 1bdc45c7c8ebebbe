"""Sizing policies: how many block-table columns each KV-cache group's row gets.

A policy is any callable ``(RunnerConfig) -> tuple[int, ...]`` returning, per
group in order, the row width in the units the row stores (kernel-block
entries, ``W * bpk``, where ids are expanded). The built-in ones model the
engine's releases as described in docs/spec.md; a user's own is named as
``module:attr``. An engine's own sizing (``vllm==X``) is resolved at the edge,
by :mod:`crossattn_sizing.specs.resolve`: this module knows no engine and no
Hypothesis (tests/test_layers.py keeps it so).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast

from crossattn_sizing.base import usercode
from crossattn_sizing.base.callables import load_callable
from crossattn_sizing.base.errors import HarnessError, JudgedFailure, PolicyCallError
from crossattn_sizing.base.intmath import align_up, cdiv
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig

Policy = Callable[[RunnerConfig], tuple[int, ...]]
Alignment = Literal["none", "pow2", "gcd"]
Length = Literal["fixed", "prefix", "v1"]


def sizing_length(config: RunnerConfig, length: Length) -> int:
    """``L``, the token length every row is sized for.

    ``fixed`` is PR #46753 (``max(M, E, S)``), ``prefix`` the code before it
    (``max(M, S)``), ``v1`` ModelRunner V1 (``max(M, E)``). Decoder-only models
    use ``M`` in every form.
    """
    m = config.max_model_len
    if not config.is_encoder_decoder:
        return m
    if length == "fixed":
        return max(m, config.encoder_budget, config.source_positions)
    if length == "prefix":
        return max(m, config.source_positions)
    return max(m, config.encoder_budget)


def alignment_multiple(block_size: int, alignment: Alignment) -> int:
    """The alignment rule: the block multiple a row's width (in manager blocks) is rounded up to.

    ``none`` keeps the width, ``pow2`` (v0.21-0.25) rounds it to ``128 // bs``
    blocks for ``bs <= 128``, ``gcd`` (v0.34) to ``128 / gcd(128, bs)``. ``bs``
    times the multiple is the aligned span: the tokens at whose multiples a
    width changes, which the property strategies aim at.
    """
    if alignment == "none":
        return 1
    if alignment == "pow2":  # v0.21 .. v0.25
        return 128 // block_size if block_size <= 128 else 1
    return 128 // math.gcd(128, block_size)  # v0.34


def widths(config: RunnerConfig, length: Length, alignment: Alignment) -> tuple[int, ...]:
    """Row widths (in stored entries) of every group for one sizing rule."""
    big_l = sizing_length(config, length)
    out = []
    for group in config.groups:
        blocks = cdiv(big_l, group.block_size * config.dcp_factor(group))
        if group.kind is GroupKind.MAMBA:
            blocks = (blocks if config.prefix_caching else 1) + config.num_speculative_blocks
            out.append(blocks)
            continue
        blocks = align_up(blocks, alignment_multiple(group.block_size, alignment))
        out.append(blocks * group.bpk)
    return tuple(out)


@dataclass(frozen=True)
class SizingPolicy:
    """A named sizing rule; calling it gives the per-group widths.

    ``expected_to_hold`` is what the harness expects of it: ``verify`` exits
    non-zero only when a policy expected to hold is found to fail.
    """

    name: str
    length: Length
    alignment: Alignment
    summary: str
    expected_to_hold: bool

    def __call__(self, config: RunnerConfig) -> tuple[int, ...]:
        """Widths from the policy's length and alignment rule."""
        return widths(config, self.length, self.alignment)


BUILTIN_POLICIES: dict[str, SizingPolicy] = {
    p.name: p
    for p in (
        SizingPolicy("mrv2", "fixed", "gcd", "ModelRunner V2 after PR #46753 (v0.34 alignment)", True),
        SizingPolicy("mrv2-prefix", "prefix", "pow2", "ModelRunner V2 before PR #46753 (v0.24)", False),
        SizingPolicy("v1", "v1", "none", "ModelRunner V1: max(M, E), no alignment", True),
        SizingPolicy("mrv2-noalign", "fixed", "none", "fixed length, no alignment (v0.19 rule)", True),
        SizingPolicy("mrv2-pow2", "fixed", "pow2", "fixed length, v0.21-0.25 alignment (v0.25)", True),
        SizingPolicy("mrv2-prefix-noalign", "prefix", "none", "pre-fix length, no alignment", False),
        SizingPolicy("mrv2-prefix-gcd", "prefix", "gcd", "pre-fix length, v0.34 alignment", False),
    )
}


def policy_from_spec(spec: str) -> Policy:
    """A built-in policy by name, or any callable given as ``module:attr``.

    Raises :class:`PolicyLoadError` with the reason when the name is unknown,
    the module does not import, the attribute is missing or not callable.
    A spec a user types may also name an engine release (``vllm==X``):
    :func:`crossattn_sizing.specs.resolve.load_policy` takes every form.
    """
    return load_callable(spec, BUILTIN_POLICIES, "sizing policy")


def policy_name(policy: Policy) -> str:
    """A printable name for reports."""
    name = getattr(policy, "name", None)
    if isinstance(name, str):
        return name
    return f"{getattr(policy, '__module__', '?')}:{getattr(policy, '__qualname__', repr(policy))}"


MAX_WIDTH = 2**40
"""The widest row a policy may answer, in entries: 2**40 int32 ids is 4 TiB per row, past any
machine, and it keeps every product the checks form (``width * kbs * C``) inside int64."""


def private_copy(config: RunnerConfig) -> RunnerConfig:
    """A copy of ``config`` (its groups copied too) that a policy may scribble on without effect.

    Built without ``__post_init__``: the fields are already valid, and this runs
    once per policy call (millions in ``prove``).
    """
    groups = []
    for group in config.groups:
        twin = object.__new__(KVCacheGroup)
        twin.__dict__.update(group.__dict__)
        groups.append(twin)
    copy = object.__new__(RunnerConfig)
    copy.__dict__.update(config.__dict__)
    copy.__dict__["groups"] = tuple(groups)
    return copy


def changed_fields(given: RunnerConfig, config: RunnerConfig) -> str:
    """Empty when the copy a policy was given still equals ``config``, else what it changed."""
    try:
        if type(given) is RunnerConfig and given.__dict__ == config.__dict__:  # the dicts: C speed
            return ""
        seen = given.__dict__
        pairs = [(name, before, seen.get(name, "<deleted>")) for name, before in config.__dict__.items()]
        for i, (group, twin) in enumerate(zip(config.groups, given.groups, strict=False)):
            pairs += [(f"groups[{i}].{name}", before, twin.__dict__.get(name, "<deleted>"))
                      for name, before in group.__dict__.items()]  # fmt: skip
        changed = [f"{name}={before!r} -> {after!r}" for name, before, after in pairs
                   if name != "groups" and after != before]  # fmt: skip
        if not changed and given.groups != config.groups:
            changed = [f"groups: {len(config.groups)} -> {len(given.groups)} groups"]
    except BaseException:  # a planted value whose __eq__ raises: changed all the same
        changed = []
    said = usercode.shown("; ".join(changed))
    return said or "its fields"


class _Named:
    """``sizing policy NAME``, worked out only when an error line is printed (not on every call)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def __str__(self) -> str:
        try:
            name = policy_name(self.policy)
        except BaseException:  # a hostile __getattr__: the line is still printed
            name = "<a policy without a printable name>"
        return f"sizing policy {usercode.shown(name, 'name')}"


PASSED_ON = (HarnessError, JudgedFailure)
"""What a policy's call passes on as it is: the harness's own errors, and an engine's code seen to fail."""


def checked_widths(policy: Policy, config: RunnerConfig) -> tuple[int, ...]:
    """Call a policy at the user-code boundary and check its answer has the promised shape.

    A user policy that raises anything (``sys.exit`` and a ``KeyboardInterrupt``
    no Ctrl-C caused included: :mod:`crossattn_sizing.base.usercode`) or takes no
    config argument, changes the config it is given (it gets a private copy,
    compared after the call), returns the wrong number of widths, non-integers
    or widths past :data:`MAX_WIDTH`, is a :class:`PolicyCallError`: bad input
    reported as one line, never a traceback or a "failing property".
    """
    given = private_copy(config)
    # The harness's own errors say what they mean. A config an engine policy cannot be asked about
    # is a NotExpressible, one of them: inside a Hypothesis example the engine's discards it too. An
    # engine's code seen to fail (its worker died, or did not answer within the deadline) is a verdict.
    try:
        result = usercode.call(policy, given, what=_Named(policy), passthrough=PASSED_ON)
    except PolicyCallError as exc:
        if config.describe() in str(exc):  # said already (by the policy's worker, which checked it first)
            raise
        raise PolicyCallError(f"{exc} (called with one RunnerConfig: {config.describe()})") from None
    name = _Named(policy)
    changed = changed_fields(given, config)
    if changed:
        raise PolicyCallError(
            f"{name} changed the RunnerConfig it was given ({changed}); "
            f"a policy must not modify its config (called with {config.describe()})"
        )
    values = result if type(result) is tuple else refuse_non_sequence(result, name)
    if len(values) != len(config.groups) or not all(type(v) is int and v >= 0 for v in values):
        said = usercode.shown(values, "answer", as_repr=True)
        raise PolicyCallError(
            f"{name} returned {said}: expected "
            f"{len(config.groups)} non-negative ints, one per KV-cache group"
        )
    widths = cast("tuple[int, ...]", values)  # every one an int, checked above
    if max(widths, default=0) > MAX_WIDTH:
        too_wide = [i for i, v in enumerate(widths) if v > MAX_WIDTH]
        raise PolicyCallError(
            f"{name} returned a width of {widths[too_wide[0]].bit_length()} bits for group "
            f"{too_wide[0]}: "
            f"a width is at most 2**40 entries (MAX_WIDTH; called with {config.describe()})"
        )
    return widths


def refuse_non_sequence(result: object, name: object) -> tuple[object, ...]:
    """``result`` as a tuple when it is a list or tuple; anything else is refused, its type named.

    A width answer is a sequence, one int per group. A mapping read as a
    sequence gives its keys (``{1000000: "x"}`` would read as width 1000000), a
    string its characters, a generator is used up by the first reading: none
    of them is an answer, so none is read as one.
    """
    if isinstance(result, (list, tuple)):  # a subclass's own __iter__ is the user's code
        return usercode.call(tuple, result, what=f"{name}: reading its answer")
    raise not_a_sequence(usercode.shown(type(result).__name__, "type"),
                         usercode.shown(result, "answer", as_repr=True), name)  # fmt: skip


def not_a_sequence(kind: str, said: str, name: object) -> PolicyCallError:
    """The error for a width answer that is no list or tuple: its type ``kind`` and its ``repr`` ``said``
    (in process as the judge reads a worker's answer: one wording)."""
    return PolicyCallError(
        f"{name} returned a {kind} ({said}): expected a list or tuple of ints, one per group"
    )


PROBE_CONFIG = RunnerConfig(
    max_model_len=2048,
    max_num_batched_tokens=4096,
    groups=(KVCacheGroup(GroupKind.FULL, 16), KVCacheGroup(GroupKind.CROSS, 16)),
)
"""An ordinary encoder-decoder config (the Nemotron-Parse shape) every policy must answer."""


def probe_policy(policy: Policy) -> Policy:
    """Call a loaded policy once on :data:`PROBE_CONFIG`, so one that cannot be called fails
    before any work starts (exit 2), not as a property failure after minutes of shrinking.

    An engine's code seen to fail on the probe (its worker died, or did not answer within the
    deadline: :class:`~crossattn_sizing.base.errors.JudgedFailure`) is not bad input: the policy
    loads, and the work that asks it about its own configs judges that failure there.
    """
    with contextlib.suppress(JudgedFailure):
        checked_widths(policy, PROBE_CONFIG)
    return policy

