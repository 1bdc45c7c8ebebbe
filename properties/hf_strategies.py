"""Strategies for the transformers differential property: tiny Whisper/BART/mBART cross-attention cases.

A case is a tiny model config built with transformers' own config class
(WhisperConfig, BartConfig, MBartConfig; never downloaded), the lengths of a
batch of requests, a block size and seeds. The RunnerConfig the block tables
are sized from comes out of :mod:`crossattn_sizing.models.adapters`, so the
property drives the same path ``reproduce`` does: config fields -> ``M``, ``S``,
encoder tokens -> widths.

Lengths follow each model's encoder: Whisper always emits
``max_source_positions`` frames (every request has ``e = S``); BART and mBART
a source of at most ``max_position_embeddings`` tokens and no ``S`` at all. A
``--max-model-len`` below the config's is drawn often: for BART it is the
shape in which the pre-fix sizing ``max(M, S)`` leaves encoder tokens without a
column. Dims stay tiny (embed dim <= 64, a few hundred encoder tokens) so an
example takes milliseconds on the torch path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from hypothesis import event
from hypothesis import strategies as st

from crossattn_sizing.base.errors import HarnessError
from crossattn_sizing.core.config import KVCacheGroup
from crossattn_sizing.models import families
from crossattn_sizing.models.adapters import ModelScenario, build_scenario
from crossattn_sizing.models.family import Family

from .config_strategies import HypothesisDraws, draw_block_sizes

FAMILIES = tuple(f.name for f in families.with_hf_module())
"""The registered families transformers has a cross-attention module for."""
HF_BLOCK_SIZES = (1, 2, 3, 4, 6, 8, 16, 32)
T = TypeVar("T")


def registered(value: T | None, family: str, what: str) -> T:
    """``value``, which the family registry (models/families/) gives every family of :data:`FAMILIES`.

    A missing one is the registry's error, not a failure of any property, so it
    is a :class:`HarnessError` (the run stops), never an ``AssertionError``.
    """
    if value is None:
        raise HarnessError(f"family {family} has no {what} in models/families/")
    return value


@dataclass(frozen=True)
class HFCrossCase:
    """One batch of requests through one decoder cross-attention layer of a tiny model."""

    family: str
    num_heads: int
    head_dim: int
    length_field: int  # Whisper: max_target_positions; BART/mBART: max_position_embeddings
    source_positions: int | None  # Whisper's max_source_positions (its e); None for BART-like
    max_model_len: int | None  # a user's --max-model-len (<= the config's), None = derived
    encoder_lens: tuple[int, ...]
    num_queries: tuple[int, ...]  # decoder tokens per request in the step (cross is non-causal)
    block_size: int
    kernel_block_size: int
    seed: int
    pool_seed: int

    @property
    def embed_dim(self) -> int:
        """The model width: heads times head size, as transformers checks it."""
        return self.num_heads * self.head_dim

    @property
    def model_family(self) -> Family:
        """The family the case was drawn for (its config class and derivation)."""
        return families.FAMILIES[self.family]

    def hf_config(self) -> Any:
        """The tiny config, from transformers' own class (the family's), eager attention."""
        build = registered(self.model_family.tiny_config, self.family, "tiny config")
        return build(
            self.length_field,
            self.source_positions,
            d_model=self.embed_dim,
            decoder_attention_heads=self.num_heads,
            encoder_attention_heads=self.num_heads,
            attn_implementation="eager",
        )

    def scenario(self) -> ModelScenario:
        """The adapters' RunnerConfig for this config, with the drawn kernel block size."""
        hf = self.hf_config()
        scenario = build_scenario(hf, max_model_len=self.max_model_len, block_size=self.block_size,
                                  source_len=max(self.encoder_lens))
        kbs = self.kernel_block_size
        groups = tuple(KVCacheGroup(g.kind, g.block_size, kbs) for g in scenario.config.groups)
        config = scenario.config.replace(groups=groups, max_num_reqs=max(len(self.encoder_lens), 1))
        return ModelScenario(scenario.name, config, scenario.encoder_len, scenario.max_model_len,
                             scenario.batched_tokens)


def cross_attention_module(case: HFCrossCase, hf_config: Any) -> torch.nn.Module:
    """The decoder layer's ``encoder_attn``, built as the decoder layer builds it, with seeded random weights.

    The weights are drawn under a forked RNG so a test does not move the global
    torch seed for its neighbours.
    """
    cls = registered(case.model_family.attention_class, case.family, "transformers module")()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(case.seed)
        module = cls(
            case.embed_dim, case.num_heads, dropout=0.0, is_decoder=True, config=hf_config, layer_idx=0
        )
        # nn.Linear's default biases are tiny; make them matter, so a dropped bias is caught.
        with torch.no_grad():
            for proj in (module.q_proj, module.k_proj, module.v_proj, module.out_proj):
                if proj.bias is not None:
                    proj.bias.normal_(0.0, 0.5)
    return module.eval()


def hidden_states(case: HFCrossCase) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per request: decoder hidden states ``[nq, E]`` and encoder output ``[e, E]``, N(0, 1)."""
    gen = torch.Generator().manual_seed(case.seed + 1)
    dec = [torch.randn(nq, case.embed_dim, generator=gen) for nq in case.num_queries]
    enc = [torch.randn(e, case.embed_dim, generator=gen) for e in case.encoder_lens]
    return dec, enc


@st.composite
def hf_cross_cases(draw: st.DrawFn, family: str | None = None, min_requests: int = 1) -> HFCrossCase:
    """A tiny case of ``family`` (drawn when None) with ``min_requests`` to 3 requests."""
    family = family or draw(st.sampled_from(FAMILIES), label="family")
    heads = draw(st.integers(1, 4), label="num_heads")
    head_dim = draw(st.sampled_from((1, 2, 4, 8, 16)), label="head_dim")
    bs, kbs = draw_block_sizes(HypothesisDraws(draw), HF_BLOCK_SIZES)
    n = draw(st.integers(min_requests, max(min_requests, 3)), label="num_requests")
    draw_lengths = registered(families.FAMILIES[family].draw_lengths, family, "length strategy")
    length_field, s, lens = draw_lengths(draw, bs, n)
    m = draw(st.one_of(st.none(), st.integers(1, length_field)), label="max_model_len")
    queries = tuple(draw(st.integers(1, 3), label=f"num_queries[{i}]") for i in range(n))
    case = HFCrossCase(
        family, heads, head_dim, length_field, s, m, lens, queries, bs, kbs,
        draw(st.integers(0, 2**31 - 1), label="seed"),
        draw(st.integers(0, 2**31 - 1), label="pool_seed"),
    )
    event(f"family {family}")
    if kbs != bs:
        event("kernel expansion (bpk > 1)")
    if m is not None and max(lens) > m:
        event("encoder tokens above --max-model-len")
    if n > 1:
        event("several requests in neighbouring rows")
    return case
