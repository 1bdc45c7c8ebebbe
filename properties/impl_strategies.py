"""Strategies for the implementation properties: slot-mapping cases, attention scenarios, content.

Sizes stay small (a few hundred tokens, head dims up to 8) so an example runs
in milliseconds on the torch path and well under a second in Triton's
interpreter. The regimes the bugs live in are drawn on purpose and named with
``event()``: DCP with interleave, kernel-block expansion, encoder lengths past
what a pre-fix row covers (Nemotron-Parse-like configs: ``S`` absent, ``E > M``),
several requests in neighbouring rows (the unguarded spill needs a neighbour).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import event
from hypothesis import strategies as st

from crossattn_sizing.base.errors import HarnessError
from crossattn_sizing.base.intmath import cdiv
from crossattn_sizing.core import admission
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig

from .capacity_strategies import encoder_lengths
from .config_strategies import HypothesisDraws, batched_tokens, draw_group, encoder_decoder_config

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Small block sizes, with non-powers of two (3, 6, 48) where alignment rules differ.
SMALL_BLOCK_SIZES = (1, 2, 3, 4, 6, 8, 16, 32, 48, 64)
HEAD_DIMS = (1, 2, 3, 4, 8)


def dtypes() -> st.SearchStrategy[torch.dtype]:
    """The KV-cache dtypes the engine runs: fp32, fp16, bf16."""
    return st.sampled_from(DTYPES)


def seeds() -> st.SearchStrategy[int]:
    """A seed for content or for the block pool's shuffle."""
    return st.integers(0, 2**32 - 1)


@dataclass(frozen=True)
class AttentionShape:
    """Heads, head dim and dtype of one scenario."""

    num_heads: int
    head_dim: int
    dtype: torch.dtype


@st.composite
def attention_shapes(draw: st.DrawFn) -> AttentionShape:
    """Heads, head size and dtype of an attention case (the dtype reported as an event)."""
    heads = draw(st.integers(1, 2), label="num_heads")
    head_dim = draw(st.sampled_from(HEAD_DIMS), label="head_dim")
    dtype = draw(dtypes(), label="dtype")
    event(f"dtype {str(dtype).removeprefix('torch.')}")
    return AttentionShape(heads, head_dim, dtype)


def power_of_two_shapes() -> st.SearchStrategy[AttentionShape]:
    """Shapes whose head size is a power of two (what vLLM's DCP correction kernel takes)."""
    return attention_shapes().filter(lambda shape: shape.head_dim & (shape.head_dim - 1) == 0)


@dataclass(frozen=True)
class ContentScales:
    """How large a scenario's numbers are: scores from near zero to several hundred, values
    from tiny to near the dtype's limit.

    ``qk``: standard deviation of query and key entries; a score ``q.k/sqrt(D)``
    then has standard deviation ``qk**2``, so 0.1 gives a flat softmax and 16
    scores of several hundred, past ``exp``'s fp32 overflow at 88.7 (a softmax
    that forgets to subtract the row maximum returns inf/inf). ``value_decades``:
    each value row is scaled by ``10**u``, ``u`` uniform in that range (mixed
    signs, so large values cancel).
    """

    qk: float
    value_decades: tuple[float, float]


# Decades of values per dtype: up to about 1e4 in fp16 (max 65504, values up to ~4 sigma),
# 1e30 in fp32/bf16 (max 3.4e38; sums of a few thousand stay far below it), down to 1e-6.
VALUE_DECADES = {torch.float16: 4.0, torch.float32: 30.0, torch.bfloat16: 30.0}
QK_SCALES = (1.0, 0.1, 4.0, 8.0, 16.0)
UNIT = ContentScales(1.0, (0.0, 0.0))


@st.composite
def content_scales(draw: st.DrawFn, dtype: torch.dtype) -> ContentScales:
    """Score and value magnitudes for one scenario (``UNIT`` first: O(1) scores and values)."""
    qk = draw(st.sampled_from(QK_SCALES), label="qk_scale")
    top = draw(st.sampled_from((0.0, 2.0, VALUE_DECADES[dtype])), label="value_decades_high")
    low = draw(st.sampled_from((0.0, -6.0)), label="value_decades_low")
    event(f"score scale ~{qk * qk:g}" + (" (past exp's fp32 overflow)" if 3 * qk * qk > 88.7 else ""))
    if top > 2.0:
        event("values up to the dtype's range")
    return ContentScales(qk, (low, top))


def make_content(
    seed: int,
    num_tokens: int,
    shape: AttentionShape,
    spread: float = 1.0,
    decades: tuple[float, float] = (0.0, 0.0),
) -> torch.Tensor:
    """``[num_tokens, heads, head_dim]`` values rounded to the dtype, every token's row distinct.

    Each token's row is scaled by ``spread * 10**u``, ``u`` uniform in ``decades``.
    Distinct rows matter: a kernel that reads a neighbouring cell is only
    caught if the neighbour holds something else. Random rows rarely collide
    even in bf16, and any that do are redrawn.
    """
    gen = torch.Generator().manual_seed(seed)
    lo, hi = decades
    scale = torch.full((num_tokens, 1, 1), float(spread))
    if hi > lo:  # (drawn only then, so unscaled content is what it always was for a seed)
        scale *= torch.pow(10.0, lo + (hi - lo) * torch.rand(num_tokens, 1, 1, generator=gen))
    out = (torch.randn(num_tokens, shape.num_heads, shape.head_dim, generator=gen) * scale).to(shape.dtype)
    for _ in range(100):
        seen: set[tuple[float, ...]] = set()
        redraw = []
        for t, row in enumerate(out.reshape(num_tokens, -1).to(torch.float64).tolist()):
            key = tuple(row)
            if key in seen:
                redraw.append(t)
            seen.add(key)
        if not redraw:
            return out
        fresh = torch.randn(len(redraw), shape.num_heads, shape.head_dim, generator=gen) * scale[redraw]
        out[redraw] = fresh.to(shape.dtype)
    # The strategy's own limit, not a failure of the property: a HarnessError stops the run.
    raise HarnessError("could not draw distinct token contents")  # pragma: no cover - astronomically rare


# Slot mapping cases ----------------------------------------------------------------


@dataclass(frozen=True)
class SlotGroup:
    """One KV-cache group of a slot-mapping case.

    ``kind`` is ``self``, ``cross`` (the engine's path, ignoring DCP) or
    ``cross-sharded`` (the consistent variant). ``width`` is in manager blocks;
    the row holds ``width * bpk`` entries.
    """

    kind: str
    block_size: int
    kbs: int
    width: int

    @property
    def bpk(self) -> int:
        """Kernel blocks per block: how many entries one manager block becomes."""
        return self.block_size // self.kbs


@dataclass(frozen=True)
class SlotRequest:
    """A request in a step: its row, decoder tokens (``computed`` already cached), encoder tokens."""

    row: int
    seq_len: int
    computed: int
    encoder_len: int

    @property
    def step_positions(self) -> range:
        """Decoder positions this step computes."""
        return range(self.computed, self.seq_len)


@dataclass(frozen=True)
class SlotCase:
    """Groups, requests and padding of one slot-mapping step."""

    dcp_size: int
    interleave: int
    num_rows: int
    groups: tuple[SlotGroup, ...]
    requests: tuple[SlotRequest, ...]
    pad_extra: int

    def group_dcp(self, group: SlotGroup) -> int:
        """``C`` the group's positions are sharded over (the engine's cross path: 1)."""
        return 1 if group.kind == "cross" else self.dcp_size

    def blocks(self, group: SlotGroup, request: SlotRequest) -> int:
        """Manager blocks the group's row of ``request`` receives."""
        tokens = request.seq_len if group.kind == "self" else request.encoder_len
        return cdiv(tokens, group.block_size * self.group_dcp(group))

    def positions(self, group: SlotGroup, request: SlotRequest) -> range:
        """Positions whose slots the step computes in ``group``."""
        return request.step_positions if group.kind == "self" else range(request.encoder_len)


@st.composite
def slot_cases(draw: st.DrawFn) -> SlotCase:
    """A step over 1-3 groups: self and cross (both modes), DCP, interleave, expansion, padding."""
    dcp_size = draw(st.sampled_from([1, 1, 2, 3, 4]), label="dcp_size")
    interleave = draw(st.sampled_from([1, 2, 3, 4]), label="dcp_interleave") if dcp_size > 1 else 1
    num_groups = draw(st.integers(1, 3), label="num_groups")
    kinds = ["self", "cross", "cross-sharded"] if dcp_size > 1 else ["self", "cross"]
    raw_groups = []
    for i in range(num_groups):
        kind = draw(st.sampled_from(kinds), label=f"group[{i}].kind")
        # kbs is a multiple of the interleave, as the engine requires under DCP.
        kbs = interleave * draw(st.integers(1, 8), label=f"group[{i}].kbs_over_interleave")
        bpk = draw(st.sampled_from([1, 1, 2, 3]), label=f"group[{i}].bpk")
        raw_groups.append((kind, kbs * bpk, kbs))
    num_rows = draw(st.integers(1, 6), label="num_rows")
    order = draw(st.permutations(range(num_rows)), label="row_order")
    n = draw(st.integers(1, num_rows), label="num_requests")
    requests = []
    for i in range(n):
        seq_len = draw(st.integers(1, 160), label=f"req[{i}].seq_len")
        computed = draw(st.integers(0, seq_len - 1), label=f"req[{i}].computed")
        enc = draw(st.integers(1, 200), label=f"req[{i}].encoder_len")
        requests.append(SlotRequest(order[i], seq_len, computed, enc))
    draft = SlotCase(dcp_size, interleave, num_rows, (), tuple(requests), 0)
    groups = []
    for i, (kind, bs, kbs) in enumerate(raw_groups):
        probe = SlotGroup(kind, bs, kbs, 0)
        need = max(draft.blocks(probe, r) for r in requests)
        slack = draw(st.integers(0, 2), label=f"group[{i}].width_slack")
        groups.append(SlotGroup(kind, bs, kbs, need + slack))
    pad_extra = draw(st.integers(0, 8), label="pad_extra")
    case = SlotCase(dcp_size, interleave, num_rows, tuple(groups), tuple(requests), pad_extra)
    event(f"DCP size {dcp_size}" + (f", interleave {interleave}" if dcp_size > 1 else ""))
    for g in groups:
        event(f"group kind {g.kind}")
        if g.bpk > 1:
            event("kernel expansion (bpk > 1)")
    if n > 1:
        event("several requests in one step")
    if pad_extra:
        event("padding past the step's tokens")
    return case


# Attention scenarios --------------------------------------------------------------


def correctable_dcp() -> dict[str, st.SearchStrategy[Any]]:
    """``configs`` and ``shapes`` for the self-attention property that reach vLLM's DCP correction.

    DCP 2 or 4 with the self-attention group sharded over the ranks (a replicated
    group runs on one rank and has nothing to combine) and power-of-two head
    sizes: the correction kernel spans ranks and head dimension with ``tl.arange``.
    """

    def combined(config: RunnerConfig) -> bool:
        full = next(g for g in config.groups if g.kind is GroupKind.FULL)
        return config.dcp_size in (2, 4) and full.dcp_sharded

    return {
        "configs": attention_configs().filter(combined),
        "shapes": power_of_two_shapes(),
    }


@st.composite
def attention_configs(draw: st.DrawFn, max_dcp: int = 4) -> RunnerConfig:
    """Small encoder-decoder configs with a cross and a full (self-attention) group.

    Half are Nemotron-Parse-like (``max_source_positions`` absent, encoder
    budget above ``max_model_len``): the shape the pre-fix sizing gets wrong.
    Lengths stay in the hundreds so the pure-Python oracle keeps up.
    """
    nemotron_like = draw(st.booleans(), label="nemotron_like")
    m = draw(st.integers(4, 160), label="max_model_len")
    s: int | None
    e: int | None
    if nemotron_like:
        s = None
        e = draw(st.integers(m + 1, m + 480), label="max_num_encoder_input_tokens")
    else:
        s = draw(st.one_of(st.none(), st.integers(0, 2 * m)), label="max_source_positions")
        e = draw(st.one_of(st.none(), st.integers(1, 2 * m + 64)), label="max_num_encoder_input_tokens")
    b = batched_tokens(m, e, draw(st.integers(0, 64), label="batched_tokens_above_needed"))
    dcp_size = draw(st.sampled_from([1, 1, 2, 3, 4][: 1 + max_dcp]), label="dcp_size") if max_dcp > 1 else 1
    # Under DCP the interleave is drawn first and block sizes from its multiples:
    # drawing sizes first leaves almost only I = 1 (it must divide every kbs).
    interleave = draw(st.sampled_from([1, 1, 2, 4]), label="dcp_interleave") if dcp_size > 1 else 1
    d = HypothesisDraws(draw)
    groups = [draw_group(d, kind, SMALL_BLOCK_SIZES, dcp_size, multiple_of=interleave)
              for kind in (GroupKind.CROSS, GroupKind.FULL)]
    if not groups[1].dcp_sharded:  # a replicated self-attention group: every rank has it all
        event("replicated self-attention group under DCP")
    if draw(st.booleans(), label="self_group_first"):
        groups.reverse()
    config = encoder_decoder_config(groups, m, b, e, s, (dcp_size, interleave),
                                    draw(st.integers(1, 4), label="max_num_reqs"))
    event("Nemotron-Parse-like (S absent, E > M)" if nemotron_like else "generic config")
    if dcp_size > 1:
        event(f"DCP size {dcp_size}, interleave {interleave}")
    if any(g.bpk > 1 for g in groups):
        event("kernel expansion (bpk > 1)")
    return config


@dataclass(frozen=True)
class CrossCase:
    """Requests of a cross-attention step: rows (scheduling order), encoder lengths, decode queries."""

    rows: tuple[int, ...]
    encoder_lens: tuple[int, ...]
    num_queries: tuple[int, ...]


@st.composite
def cross_cases(draw: st.DrawFn, config: RunnerConfig) -> CrossCase:
    """Admitted requests, biased to the encoder bound and entry edges (the lead's ``encoder_lengths``)."""
    n = draw(st.integers(1, config.max_num_reqs), label="num_requests")
    order = draw(st.permutations(range(config.max_num_reqs)), label="row_order")
    lens = tuple(draw(encoder_lengths(config), label=f"encoder_len[{i}]") for i in range(n))
    queries = tuple(draw(st.integers(1, 2), label=f"num_queries[{i}]") for i in range(n))
    rows = tuple(order[:n])
    if n > 1 and any(abs(a - b) == 1 for a in rows for b in rows):
        event("requests in neighbouring rows")
    return CrossCase(rows, lens, queries)


@dataclass(frozen=True)
class SelfCase:
    """Requests of a self-attention run: rows, prompt lengths, and whether each also decodes a token."""

    rows: tuple[int, ...]
    prompt_lens: tuple[int, ...]
    decode: tuple[bool, ...]


@st.composite
def self_cases(draw: st.DrawFn, config: RunnerConfig, max_prompt: int = 40) -> SelfCase:
    """Prompts short enough to leave room for a decode token within ``max_model_len``."""
    n = draw(st.integers(1, config.max_num_reqs), label="num_requests")
    order = draw(st.permutations(range(config.max_num_reqs)), label="row_order")
    top = max(1, min(max_prompt, config.max_model_len - 1))
    lens = tuple(draw(st.integers(1, top), label=f"prompt_len[{i}]") for i in range(n))
    decode = tuple(
        draw(st.booleans(), label=f"decode[{i}]") and lens[i] < config.max_model_len for i in range(n)
    )
    return SelfCase(tuple(order[:n]), lens, decode)


def pool_size(config: RunnerConfig, group: KVCacheGroup, lengths: list[int], slack: int) -> int:
    """Blocks a pool needs for ``lengths`` tokens per request in ``group``, plus the null block."""
    return 1 + slack + sum(admission.blocks_allocated(config, group, n) for n in lengths)
