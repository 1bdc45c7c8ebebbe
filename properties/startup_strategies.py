"""The settings that shape an engine's start-up batches, drawn: lengths, budgets, capture sizes, blocks, DCP.

A start-up batch is built by the engine from its own settings, so any valid
setting reaches it. Valid here means what vLLM's config accepts:
``max_num_batched_tokens >= max_num_seqs`` (an error below), ``B >= M`` for an
encoder-decoder model (chunked prefill off), ``E = B`` (the scheduler config
sets ``max_num_encoder_input_tokens`` from ``max_num_batched_tokens``; it is
not a user option) and capture sizes no larger than ``B``. ``B > max_num_seqs
* M`` only logs a warning; ``within_warning`` keeps to settings that do not.
"""

from __future__ import annotations

from hypothesis import strategies as st

from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig

BLOCK_SIZES = (16, 32, 64, 128)
MAX_CAPTURE = 512
"""vLLM's default largest capture size."""


@st.composite
def startup_settings(
    draw: st.DrawFn, *, within_warning: bool = False, encoder_decoder: bool | None = None, dcp: bool = True
) -> tuple[RunnerConfig, tuple[int, ...]]:
    """A config the runner starts with and its CUDA-graph capture sizes."""
    enc_dec = draw(st.booleans(), label="encoder_decoder") if encoder_decoder is None else encoder_decoder
    bs = draw(st.sampled_from(BLOCK_SIZES), label="block_size")
    m = draw(st.integers(1, 4096), label="max_model_len")
    n = draw(st.integers(1, 8), label="max_num_seqs")
    low = max(n, m) if enc_dec else n
    high = max(low, n * m if within_warning else 4 * n * m)
    b = draw(st.integers(low, high), label="max_num_batched_tokens")
    c = draw(st.sampled_from((1, 2, 4)), label="dcp") if dcp else 1
    s = draw(st.none() | st.integers(1, 4096), label="max_source_positions") if enc_dec else None
    size = st.integers(1, min(b, MAX_CAPTURE))
    sizes = draw(st.lists(size, max_size=4, unique=True), label="capture_sizes")
    groups = (
        (KVCacheGroup(GroupKind.FULL, bs), KVCacheGroup(GroupKind.CROSS, bs))
        if enc_dec
        else (KVCacheGroup(GroupKind.FULL, bs),)
    )
    config = RunnerConfig(
        m, b, groups, max_num_encoder_input_tokens=b, max_source_positions=s, dcp_size=c,
        max_num_reqs=n, is_encoder_decoder=enc_dec,
    )  # fmt: skip
    return config, tuple(sorted(sizes))
