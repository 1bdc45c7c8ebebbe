"""Strategies for SGLang's start-up batches: the settings that shape the CUDA-graph runner's dummy batches.

A server is its ``--context-length`` (any, or within six tokens of the encoder
budget), its ``--max-running-requests``, the
capture sizes (``--cuda-graph-bs``: one to four sizes, each at most the
running requests, as the runner caps them) and the encoder budget its model's
config declares (``max_source_positions``: none, as Mllama's config; a
family's own, Whisper's 1500 frames; or any). Page size is 1 (one column a
token), as everywhere the SGLang family runs. Kept small (context lengths to
4096, up to 8 running requests): each example runs the release's capture and
replay code with the decode-metadata kernel interpreted.
"""

from __future__ import annotations

from hypothesis import strategies as st

from crossattn_sizing.core.startup_server import StartupServer

WHISPER_SOURCE_POSITIONS = 1500
"""Whisper's ``max_source_positions`` (every Whisper size: 30 s of audio at 50 frames a second)."""

MAX_CONTEXT = 4096
MAX_RUNNING = 8


@st.composite
def startup_servers(draw: st.DrawFn) -> StartupServer:
    """One SGLang server's start-up settings."""
    source = draw(st.one_of(st.none(), st.just(WHISPER_SOURCE_POSITIONS), st.integers(1, MAX_CONTEXT)),
                  label="max_source_positions")
    # Any context, or one within a few tokens of the encoder budget (where a dummy's E + 1 keys meet the
    # row's and the capture page table's ends: context_len + 4 and context_len columns).
    near = st.nothing() if source is None else st.integers(max(8, source - 6), source + 6)
    context_len = draw(st.one_of(st.integers(8, MAX_CONTEXT), near), label="context_len")
    max_running = draw(st.integers(1, MAX_RUNNING), label="max_running_requests")
    sizes = draw(st.lists(st.integers(1, max_running), min_size=1, max_size=4, unique=True),
                 label="capture_bs")
    return StartupServer(context_len, tuple(sorted(sizes)), max_running, source)
