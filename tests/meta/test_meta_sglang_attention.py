"""Meta-tests: the SGLang attention property fails on one-line mutations of the release's own backend.

Each copy of the recorded 0.5.23 tree (tests/sglang_tree.py) changes one line
of ``TorchNativeAttnBackend`` (``torch_native_backend.py``), the code the
property runs; the unmutated tree holds on the same batches, and a tree
without the file is "not run", never a pass or a failure. Two mutations show
only on what the draws gained: a decode that ignores the layer's softmax
scale (a non-default scale) and an extend that drops its cached prefix's
offset (a cached prefix and several prompt tokens).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import Phase, given, settings

from crossattn_sizing.engine.sglang.client import SglangAttention
from crossattn_sizing.engine.sglang.releases import RANGES, TORCH_NATIVE, AttentionStep
from crossattn_sizing.findings.results import NOT_RUN_MARK, PropertyFailure
from properties import sglang_attention
from properties.sglang_attention_strategies import (
    AttentionCase,
    attention_cases,
    mllama_config,
    mllama_tile_tokens,
    whisper_shape,
)
from tests.sglang_tree import FIXTURE

pytest.importorskip("transformers", reason="the 'hf' extra is not installed")
os.environ.setdefault("TRITON_INTERPRET", "1")

CROSS_BRANCH = "                if is_cross_attn:\n"
ENCODER_END = "                    end_kv = encoder_lens[seq_idx]\n"
SCALE = "                    scale=scaling,\n"
PREFIX_OUT = "            output[start_q:end_q, :, :] = per_req_out_redudant[prefill_seq_len_q:, :, :]\n"
PREFIX_FIRST_ROWS = PREFIX_OUT.replace("[prefill_seq_len_q:", "[:end_q - start_q")
DECODE = 1  # each line is in _run_sdpa_forward_extend (occurrence 0), then _run_sdpa_forward_decode (1)
EXTEND = 0

MUTATIONS = {
    # The decode reads one encoder key short (the last column of the encoder part dropped).
    "decode-encoder-one-short": (ENCODER_END, DECODE, ENCODER_END.replace("]\n", "] - 1\n")),
    # The extend reads one column past the encoder part (the row's first decoder column).
    "extend-encoder-one-long": (ENCODER_END, EXTEND, ENCODER_END.replace("]\n", "] + 1\n")),
    # The cross-attention decode reads the decoder part of the row instead of the encoder's.
    "decode-reads-decoder-kv": (CROSS_BRANCH, DECODE, "                if not is_cross_attn:\n"),
    # The decode ignores the layer's scale: SDPA's own default, head_dim ** -0.5.
    "decode-default-scale": (SCALE, DECODE, "                    scale=None,\n"),
    # The extend takes its outputs from the first rows, not past the cached prefix's.
    "extend-ignores-prefix": (PREFIX_OUT, EXTEND, PREFIX_FIRST_ROWS),
}


def whisper_case() -> AttentionCase:
    """Three Whisper requests (E = 1500 each, from a WhisperConfig) of different decoder lengths."""
    e, heads, kv_heads, scale = whisper_shape(2, 4)
    return AttentionCase("whisper", heads, kv_heads, 4, scale, ((e, 2, 4), (e, 1, 2), (e, 3, 7)),
                         e + 7 + 3, seed=7)


def mllama_case() -> AttentionCase:
    """Two Mllama requests (1 and 2 tiles of transformers' default vision model), grouped-query heads."""
    config = mllama_config(4, 2, 2, {})
    per_tile, _ = mllama_tile_tokens(config)
    text = config.text_config
    return AttentionCase("mllama", text.num_attention_heads, text.num_key_value_heads, 2,
                         (text.hidden_size // text.num_attention_heads) ** -0.5,
                         ((2 * per_tile, 1, 3), (per_tile, 2, 3)), 2 * per_tile + 8, seed=11)


def scaled_case() -> AttentionCase:
    """Two Whisper requests at T5's unscaled softmax (1.0, not the model's head_dim ** -0.5)."""
    e, heads, kv_heads, _scale = whisper_shape(2, 4)
    return AttentionCase("whisper", heads, kv_heads, 4, 1.0, ((e, 5, 7), (e, 2, 3)), e + 7 + 3, seed=5)


def prefix_case() -> AttentionCase:
    """Mllama requests of several prompt tokens: one whose encoder and 4 of 9 prompt tokens are a cached
    prefix, one with none, at a non-default scale."""
    config = mllama_config(4, 2, 2, {})
    per_tile, _ = mllama_tile_tokens(config)
    text = config.text_config
    return AttentionCase("mllama", text.num_attention_heads, text.num_key_value_heads, 2, 0.3,
                         ((per_tile, 9, 11, per_tile + 4), (2 * per_tile, 6, 7, 0)), 2 * per_tile + 16,
                         seed=3)


def mutated(tmp_path: Path, name: str) -> str:
    """``sglang@`` a copy of the fixture whose backend has mutation ``name`` (one line, by occurrence)."""
    old, nth, new = MUTATIONS[name]
    dest = shutil.copytree(FIXTURE, tmp_path / name)
    path = dest / TORCH_NATIVE
    text = path.read_text()
    assert text.count(old) in (1, 2) and text.count(old) > nth, (name, text.count(old))
    head, *rest = text.split(old)
    parts = [head]
    for i, tail in enumerate(rest):
        parts.append(new if i == nth else old)
        parts.append(tail)
    path.write_text("".join(parts))
    return f"sglang@{dest}"


@pytest.mark.parametrize("case", [whisper_case(), mllama_case(), scaled_case(), prefix_case()],
                         ids=["whisper-1500", "mllama-gqa", "whisper-unscaled", "mllama-cached-prefix"])
def test_the_unmutated_backend_holds(case: AttentionCase) -> None:
    assert case.batch[0][0] in (1500, 1025, 2 * 1025)  # E = 1500 (Whisper) and Mllama's tiles are exercised
    sglang_attention.check_attention(case, SglangAttention(f"sglang@{FIXTURE}"))  # raises if it does not hold


@pytest.mark.parametrize(("name", "step"), [("decode-encoder-one-short", "forward_decode"),
                                            ("extend-encoder-one-long", "forward_extend"),
                                            ("decode-reads-decoder-kv", "forward_decode")])
def test_a_one_line_mutation_fails(tmp_path: Path, name: str, step: str) -> None:
    backend = SglangAttention(mutated(tmp_path, name))
    with pytest.raises(PropertyFailure, match=f"output off the reference(.|\n)*{step}"):
        sglang_attention.check_attention(whisper_case(), backend)


@pytest.mark.parametrize(("name", "step", "case", "control"),
                         [("decode-default-scale", "forward_decode", scaled_case(), whisper_case()),
                          ("extend-ignores-prefix", "forward_extend", prefix_case(), mllama_case())],
                         ids=["scale", "prefix"])
def test_a_mutation_only_the_new_draws_reach_fails(tmp_path: Path, name: str, step: str,
                                                   case: AttentionCase, control: AttentionCase) -> None:
    """Caught on a case with what the draws gained (a non-default scale; a cached prefix with several
    prompt tokens), and held on the old kind of case (the model's scale, no prefix): only the new draws
    catch it."""
    backend = SglangAttention(mutated(tmp_path, name))
    with pytest.raises(PropertyFailure, match=f"output off the reference(.|\n)*{step}"):
        sglang_attention.check_attention(case, backend)
    sglang_attention.check_attention(control, backend)


def test_drawn_batches_fail_on_the_decoder_kv_mutation(tmp_path: Path) -> None:
    """The property's own strategy and body on drawn batches (Whisper and Mllama alike fail), without the
    shrinking phase: each shrink step is a call into the tree (about a second on a loaded CPU), and the
    fixed cases above already show which line is caught; verify runs the property with shrinking."""
    backend = SglangAttention(mutated(tmp_path, "decode-reads-decoder-kv"))
    prop = settings(max_examples=3, phases=(Phase.explicit, Phase.generate), database=None, deadline=None)(
        given(case=attention_cases())(lambda case: sglang_attention.check_attention(case, backend)))
    with pytest.raises(PropertyFailure, match="output off the reference"):
        prop()


def test_a_tree_without_the_backend_is_not_run(tmp_path: Path) -> None:
    dest = shutil.copytree(FIXTURE, tmp_path / "no-backend")
    (dest / TORCH_NATIVE).unlink()
    with pytest.raises(pytest.skip.Exception, match=r"\[not run\] .*torch_native_backend\.py") as skipped:
        sglang_attention.check_attention(whisper_case(), SglangAttention(f"sglang@{dest}"))
    assert str(skipped.value).startswith(NOT_RUN_MARK)


def test_the_ranges_without_a_cross_attention_path_say_so() -> None:
    oldest = RANGES[-1]
    assert isinstance(oldest.attention, str) and "TorchNativeAttnBackend" in oldest.attention
    assert all(isinstance(r.attention, AttentionStep) for r in RANGES[:-1])
