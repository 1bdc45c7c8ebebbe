"""How a :class:`RunnerConfig` is built from draws: the rules every config strategy follows, once.

The capacity, implementation, transformers and DCP-finding strategies draw
configs at different scales and aim at different regimes, but the config they
end with obeys the same rules: a kernel block size divides its group's block
size (and, under DCP, is a multiple of the interleave), only attention groups
other than cross may be replicated under DCP, the interleave divides every
sharded kernel block, and ``B`` covers both ``M`` and ``E``. Written here once,
a rule changes in one place, and no strategy can draw a config the others
would not.

The builders read their choices from a :class:`Draws`: the capacity
strategies' byte reader (:class:`properties.capacity_strategies.Dials`, fast,
unlabelled), a Hypothesis draw function (:class:`HypothesisDraws`, each choice
its own labelled draw), or a seeded ``random.Random`` (a benchmark's uniform
baseline). Each builder asks for its choices in a fixed order, so a strategy
that composes them draws the same sequence as before they were shared and its
stored examples stay valid.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from hypothesis import strategies as st

from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig

T = TypeVar("T")


class Draws(Protocol):
    """A source of choices. ``label`` names a choice where the source records it (Hypothesis)."""

    def pick(self, options: Sequence[T], label: str | None = None) -> T:
        """One of ``options``; the simplest (what shrinking moves toward) is the first."""
        ...

    def between(self, lo: int, hi: int, label: str | None = None) -> int:
        """An integer in ``[lo, hi]``; the simplest is ``lo``."""
        ...

    def flag(self, label: str | None = None) -> bool:
        """A coin; the simplest is False."""
        ...


D = TypeVar("D", bound=Draws)


class HypothesisDraws:
    """:class:`Draws` through a Hypothesis draw function: one labelled draw per choice.

    Why: the implementation, transformers and finding strategies run a few
    hundred examples that each cost milliseconds, so per-choice draws cost
    nothing that matters, and each choice shrinks on its own.
    """

    __slots__ = ("draw",)

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw

    def pick(self, options: Sequence[T], label: str | None = None) -> T:
        """One of ``options``, labelled so a failure report names the draw."""
        return self.draw(st.sampled_from(options), label=label)

    def between(self, lo: int, hi: int, label: str | None = None) -> int:
        """An integer in ``[lo, hi]``, labelled so a failure report names the draw."""
        return self.draw(st.integers(lo, hi), label=label)

    def flag(self, label: str | None = None) -> bool:
        """A boolean, labelled so a failure report names the draw."""
        return self.draw(st.booleans(), label=label)


@functools.cache
def divisors(n: int) -> tuple[int, ...]:
    """Positive divisors of ``n`` in increasing order."""
    return tuple(d for d in range(1, n + 1) if n % d == 0)


@functools.cache
def kernel_block_sizes(block_size: int, multiple_of: int = 1) -> tuple[int, ...]:
    """Kernel block sizes a group of ``block_size`` can page with, largest (no expansion) first.

    A kernel block divides the manager block (a block expands to ``bs/kbs``
    kernel blocks); under DCP it is also a multiple of the interleave, since
    slot mapping interleaves within kernel blocks.
    """
    return tuple(k for k in divisors(block_size)[::-1] if k % multiple_of == 0)


def any_kernel_block(d: Draws, block_size: int, multiple_of: int = 1, label: str | None = None) -> int:
    """A kernel block size, each allowed one alike (the block size itself first)."""
    return d.pick(kernel_block_sizes(block_size, multiple_of), label=label)


def draw_block_sizes(
    d: D,
    block_sizes: Sequence[int],
    multiple_of: int = 1,
    kernel: Callable[[D, int], int] | None = None,
    labels: tuple[str, str] = ("block_size", "kernel_block_size"),
) -> tuple[int, int]:
    """A block size (those of ``block_sizes`` that are multiples of ``multiple_of``) and its kernel block.

    ``kernel`` chooses the kernel block size from the block size; by default
    :func:`any_kernel_block`.
    """
    sizes = block_sizes if multiple_of == 1 else tuple(b for b in block_sizes if b % multiple_of == 0)
    bs = d.pick(sizes, label=labels[0])
    if kernel is not None:
        return bs, kernel(d, bs)
    return bs, any_kernel_block(d, bs, multiple_of, label=labels[1])


# Each group's choices are labelled with its kind (labels only Hypothesis records; made once, not per draw).
_GROUP_LABELS = {k: (f"{k.value}.block_size", f"{k.value}.kernel_block_size", f"{k.value}.dcp_sharded")
                 for k in GroupKind}


def draw_group(
    d: D,
    kind: GroupKind,
    block_sizes: Sequence[int],
    dcp_size: int,
    multiple_of: int = 1,
    kernel: Callable[[D, int], int] | None = None,
    replicated: bool = False,
) -> KVCacheGroup:
    """A group of ``kind``: block sizes as :func:`draw_block_sizes`, then whether it is DCP-sharded.

    Under DCP a cross group is always sharded (the sizing divides its width by
    ``C``); any other group is drawn sharded or replicated (every rank holding
    all of it), or, with ``replicated``, replicated without a draw.
    """
    labels = _GROUP_LABELS[kind]
    bs, kbs = draw_block_sizes(d, block_sizes, multiple_of, kernel, labels[:2])
    sharded = True
    if dcp_size > 1 and kind is not GroupKind.CROSS:
        sharded = not replicated and d.flag(label=labels[2])
    return KVCacheGroup(kind, bs, kbs, sharded)


@functools.cache
def interleaves(sharded_kernel_blocks: tuple[int, ...]) -> tuple[int, ...]:
    """The DCP interleaves that divide every one of ``sharded_kernel_blocks``, smallest first."""
    kbs = sharded_kernel_blocks
    return tuple(i for i in divisors(min(kbs)) if all(k % i == 0 for k in kbs))


def draw_interleave(d: Draws, groups: Iterable[KVCacheGroup], dcp_size: int) -> int:
    """An interleave every DCP-sharded attention group's kernel block allows (1 without DCP: no draw)."""
    if dcp_size == 1:
        return 1
    sharded = tuple(g.kbs for g in groups if g.kind.is_attention and g.dcp_sharded)
    return d.pick(interleaves(sharded), label="dcp_interleave")


def batched_tokens(max_model_len: int, encoder_budget: int | None, above: int) -> int:
    """``B``: ``above`` tokens more than both ``M`` and ``E`` (when set).

    ``B >= M`` because encoder-decoder models run without chunked prefill, and
    the engine refuses to start otherwise. ``B >= E`` keeps ``E`` the budget
    that binds admission, so a drawn ``E`` is the bound a row must cover
    (``E`` unset defaults to ``B``).
    """
    return max(max_model_len, encoder_budget or 0) + above


def encoder_decoder_config(
    groups: Iterable[KVCacheGroup],
    m: int,
    b: int,
    e: int | None = None,
    s: int | None = None,
    sharding: tuple[int, int] = (1, 1),
    max_num_reqs: int = 1,
    mamba: tuple[bool, int] = (False, 0),
) -> RunnerConfig:
    """The config of drawn values, named by docs/spec.md §1's symbols.

    ``sharding`` is ``(C, I)``; ``mamba`` is ``(prefix_caching, num_speculative_blocks)``,
    the fields only mamba widths read.
    """
    return RunnerConfig(
        max_model_len=m, max_num_batched_tokens=b, max_num_encoder_input_tokens=e, max_source_positions=s,
        dcp_size=sharding[0], dcp_interleave=sharding[1], max_num_reqs=max_num_reqs, groups=tuple(groups),
        prefix_caching=mamba[0], num_speculative_blocks=mamba[1],
    )  # fmt: skip
