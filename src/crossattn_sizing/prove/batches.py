"""Asking a policy about a tile of configs: one batched call where it can, else one call each.

Why: a policy behind a process boundary (``vllm==X``) pays a round trip per
call, so ``prove`` asks a whole tile through its ``widths_many`` when it has
one; a plain callable is asked config by config. Either way every config
gets exactly one answer, its widths or why there is none, and a policy that
raises stops ``prove`` at that config (:class:`PolicyRaised`).
"""

from __future__ import annotations

import base64
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import numpy as np

from crossattn_sizing.base import usercode
from crossattn_sizing.base.errors import (
    HarnessError,
    JudgedFailure,
    NotExpressible,
    PolicyCallError,
    described,
)
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.config_tile import ConfigTile
from crossattn_sizing.core.policies import MAX_WIDTH, Policy, checked_widths, policy_name
from crossattn_sizing.prove.domain import Domain


class PolicyRaised(Exception):
    """The policy raised on one config of the domain (a worker that died included); prove stops there.

    Not a :class:`HarnessError`: the policy failed on a config it was asked
    about, which is a verdict (that config has no widths), not bad input.
    """

    def __init__(self, config: RunnerConfig, error: Exception) -> None:
        super().__init__(described(error))
        self.config = config
        self.error = error


class BatchDisagrees(AssertionError):
    """A policy's batch method answered a config differently from the policy itself: its failure."""


Answer = tuple[int, ...] | Exception
"""One config's answer from a batch: its widths, or what asking about it raised."""

BatchWidths = Callable[[Sequence[RunnerConfig]], list[Answer]]
"""A policy's optional ``widths_many(configs)``: one :data:`Answer` per config, in order.

The list may end right after an exception (the configs after it were not
asked). What it answers must be what calling the policy on each config
would; prove uses it when present, so a policy behind a process boundary
(``vllm==X``) pays one round trip per batch instead of one per config. An
optional ``end_batches()`` is called when ``prove_all`` is done.
"""


def batch_method(policy: Policy) -> BatchWidths | None:
    """The policy's ``widths_many`` when it has one (:data:`BatchWidths`), else None."""
    many = getattr(policy, "widths_many", None)
    return many if callable(many) else None


def tile_configs(domain: Domain, g0: int, g1: int, j0: int, j1: int) -> ConfigTile:
    """The configs of a tile, group rows outer, length indices inner (:class:`ConfigTile`).

    The first config of each group row is built and validated as usual; the
    tile builds the rest from it, its lengths changed, only when asked.
    """
    return ConfigTile([domain.config(g, j0) for g in range(g0, g1)], *domain.lengths(j0, j1))


class PackedWidths(Sequence[Answer]):
    """A batch's answers as arrays: config ``i`` answered ``lens[i]`` ints of ``flat``, in order, or,
    where ``lens[i]`` is negative, ``items[i]`` (an exception, or a value that is no tuple of ints).

    Why: a policy's worker sends a prove tile's answers packed (tens of
    thousands of 1-tuples); :func:`policy_widths` judges every value of them
    in one numpy pass (:meth:`single_widths`) and only the rest one by one.
    """

    def __init__(self, lens: np.ndarray, flat: np.ndarray, items: dict[int, Any]) -> None:
        sizes = np.maximum(lens, 0)
        if int(sizes.sum()) != flat.size or set(items) != set(np.flatnonzero(lens < 0).tolist()):
            raise PolicyCallError(f"a packed answer of {lens.size} configs does not account for its "
                                  f"{flat.size} ints and {len(items)} other items exactly")  # fmt: skip
        self.lens, self.flat, self.items = lens, flat, items
        self.starts = np.cumsum(sizes) - sizes

    @classmethod
    def joined(cls, parts: Sequence[PackedWidths]) -> PackedWidths:
        """The answers of consecutive batches as one: what each part answered, in order."""
        items: dict[int, Any] = {}
        offset = 0
        for part in parts:
            items.update((offset + i, item) for i, item in part.items.items())
            offset += len(part)
        return cls(np.concatenate([p.lens for p in parts]), np.concatenate([p.flat for p in parts]), items)

    def __len__(self) -> int:
        return int(self.lens.size)

    def __getitem__(self, index: int) -> Answer:  # type: ignore[override]
        n = int(self.lens[index])
        if n < 0:
            return cast("Answer", self.items[index % len(self)])
        start = int(self.starts[index])
        return tuple(self.flat[start : start + n].tolist())

    def single_widths(self) -> tuple[np.ndarray, np.ndarray]:
        """Each config's width where its answer is one int in ``[0, MAX_WIDTH]``, and where it is."""
        widths = np.zeros(self.lens.size, dtype=np.int64)
        single = self.lens == 1
        widths[single] = self.flat[self.starts[single]]
        ok = single & (widths >= 0) & (widths <= MAX_WIDTH)
        return np.where(ok, widths, 0), ok


def packed_arrays(data: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, dict[int, Any]]:
    """A ``widths_many`` answer packed by the worker (:func:`crossattn_sizing.engine.subject.bind_packing`):
    each config's count of ints (-1: its item is in ``rest``), the ints, and the rest by config index."""
    raw_lens, raw_q = base64.b64decode(data["lens"]), base64.b64decode(data["q"])
    if len(raw_lens) % 4 or len(raw_q) % 8:
        raise PolicyCallError(f"a packed widths_many answer of {len(raw_lens)} and {len(raw_q)} bytes is no "
                              "int32 and int64 arrays (the worker's packing broke)")  # fmt: skip
    rest = {int(i): item for i, item in data["rest"].items()}
    return np.frombuffer(raw_lens, dtype="<i4"), np.frombuffer(raw_q, dtype="<i8"), rest


def _batch_answers(policy: Policy, many: BatchWidths, configs: Sequence[RunnerConfig]) -> Sequence[Answer]:
    """Each config's answer through the policy's ``widths_many``, a sample asked again (cross_check)."""

    def asked() -> Sequence[Answer]:
        answers = many(configs)
        return answers if isinstance(answers, PackedWidths) else list(answers)

    answers = usercode.call(asked, what=f"sizing policy {policy_name(policy)}: widths_many",
                            passthrough=(HarnessError,))  # fmt: skip
    cross_check(policy, configs, answers)
    return answers


def _single_answers(policy: Policy, configs: Sequence[RunnerConfig]) -> Iterable[Answer]:
    """Each config's answer from one call each.

    A call that raises (or answers nonsense) stops here with a
    :class:`PolicyRaised` holding the :class:`PolicyCallError`.
    """
    for config in configs:
        try:
            # The user-code boundary: whatever the policy raises or does to its config is a
            # PolicyCallError naming the config (bad input), which stops prove.
            yield checked_widths(policy, config)
        except NotExpressible as exc:  # no answer for this config: its item, not a stop
            yield exc
        except (PolicyCallError, JudgedFailure) as exc:  # prove stops at this config, and says which
            raise PolicyRaised(config, exc) from None


SAMPLE = 4
"""Configs of each batch asked again one at a time: the first, the last and two drawn from the batch."""


def sample_indices(count: int) -> list[int]:
    """Which of a batch's ``count`` configs are asked again: the ends and two drawn in between.

    Drawn from a generator seeded by the batch's size, so a run repeats
    exactly; a policy cannot tell which configs are checked from the configs it
    is asked about in one call.
    """
    if count <= SAMPLE:
        return list(range(count))
    rng = random.Random(count * 7919 + 17)
    return sorted({0, count - 1, *rng.sample(range(1, count - 1), SAMPLE - 2)})


def cross_check(policy: Policy, configs: Sequence[RunnerConfig], answers: Sequence[Answer]) -> None:
    """A batch method must answer what single calls do: a sample of each batch is asked again.

    A batch that disagrees with the policy's own single answer on a sampled
    config is the policy's failure at that config (:class:`PolicyRaised`),
    both answers shown: ``prove`` judges what the batch said, ``check`` and
    the properties what single calls say, so the two must be one policy.
    """
    for i in sample_indices(min(len(configs), len(answers))):
        batch = answers[i]
        if isinstance(batch, Exception):
            continue  # its own item: a config with no answer is judged as such
        try:
            single: Answer = checked_widths(policy, configs[i])
        except NotExpressible as exc:
            single = exc
        except JudgedFailure as exc:  # the single call ended its worker or did not answer: that config fails
            raise PolicyRaised(configs[i], exc) from None
        if isinstance(single, Exception) or tuple(batch) != single:
            if isinstance(single, Exception):
                said = usercode.shown(described(single))
            else:
                said = usercode.shown(single, as_repr=True)
            raise PolicyRaised(configs[i], BatchDisagrees(
                f"sizing policy {policy_name(policy)}: widths_many answered "
                f"{usercode.shown(batch, as_repr=True)} but a single call answers {said} "
                f"for config {i} of the batch; the batch method must give what single calls give"
            ))  # fmt: skip


def policy_widths(
    domain: Domain, policy: Policy, g0: int, g1: int, j0: int, j1: int
) -> tuple[np.ndarray, np.ndarray]:
    """The policy's cross width for every config of a tile (:func:`tile_configs`, :func:`_batch_answers`).

    What it costs is the policy's own time: a config is built here only where
    the policy is called here, or where its answer needs one to be judged. An
    answer that is not a 1-tuple of a non-negative int goes through
    :func:`checked_widths`, which accepts any sequence and names a bad one.
    The second array marks the configs the policy could not be asked about
    (:class:`NotExpressible`): not judged.
    """
    configs = tile_configs(domain, g0, g1, j0, j1)
    count = len(configs)
    out = np.zeros(count, dtype=np.int64)
    unasked = np.zeros(count, dtype=bool)
    many = batch_method(policy)
    answers = _batch_answers(policy, many, configs) if many is not None else _single_answers(policy, configs)
    pairs: Iterable[tuple[int, Answer]] = enumerate(answers)
    done = 0
    if isinstance(answers, PackedWidths) and len(answers) == count:
        widths, ok = answers.single_widths()  # every value judged here; the rest below, one by one
        out[:] = widths
        pairs, done = ((i, answers[i]) for i in np.flatnonzero(~ok).tolist()), count
    for i, w in pairs:
        if i == count:
            done += 1  # one answer too many
            break
        if type(w) is tuple and len(w) == 1 and type(w[0]) is int and 0 <= w[0] <= MAX_WIDTH:
            out[i] = w[0]
        elif isinstance(w, NotExpressible):
            unasked[i] = True
        elif isinstance(w, PolicyCallError):  # the policy misbehaved on this config: stop there, naming it
            raise PolicyRaised(configs[i], w) from None
        elif isinstance(w, HarnessError):
            raise w
        elif isinstance(w, Exception):
            raise PolicyRaised(configs[i], w) from w
        else:  # asked again alone: a bad answer is named as the single call names it, with its config
            try:
                out[i] = checked_widths(policy, configs[i])[0]
            except (PolicyCallError, JudgedFailure) as exc:
                raise PolicyRaised(configs[i], exc) from None
        done = max(done, i + 1)
    if done != count:
        raise PolicyCallError(
            f"sizing policy {policy_name(policy)}: widths_many did not answer each of its {count} "
            "configs exactly once (expected one answer per config, in order)"
        )
    shape = (g1 - g0, j1 - j0)
    return out.reshape(shape), unasked.reshape(shape)
