"""Which of an SGLang release's steps run as its own code, and what stands in, per release range (data).

SGLang moved the functions the harness runs between files and renamed some
from one release to the next (the decode rule is ``alloc_for_decode`` in
``mem_cache/common.py`` up to 0.5.15, in ``mem_cache/allocation.py`` from
0.5.16, and ``alloc_for_decode_default`` there from 0.5.22). Rather than
guessing, each range below names, for every step, the file and the
definition that runs; a release is matched to its range by its own version
file (``sglang/_version.py``), or, for a checkout without one, to the newest
range whose files and definitions the tree holds. A range is data: adding a
release that moved something again is one more :class:`SglangRange` row.

What a step's verdict means never comes from this table: the table only says
where the code is. Whether a release takes a slice or a per-request gather,
and whether it reads past a row, is observed by running that code
(:mod:`crossattn_sizing.engine.sglang.run`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.engine.adapter import AdapterGap
from crossattn_sizing.releases.versions import series_key

FA3 = "sglang/srt/layers/attention/flashattention_backend.py"
FORWARD_BATCH_INFO = "sglang/srt/model_executor/forward_batch_info.py"
MEMORY_POOL = "sglang/srt/mem_cache/memory_pool.py"
SCHEDULE_BATCH = "sglang/srt/managers/schedule_batch.py"
COMMON = "sglang/srt/mem_cache/common.py"
ALLOCATION = "sglang/srt/mem_cache/allocation.py"
ALLOCATION_SIZING = "sglang/srt/mem_cache/allocation_sizing.py"
VERSION_FILE = "sglang/_version.py"
TP_WORKER = "sglang/srt/managers/tp_worker.py"
SCHEDULER = "sglang/srt/managers/scheduler.py"
MANAGER_UTILS = "sglang/srt/managers/utils.py"
ALLOCATOR_BASE = "sglang/srt/mem_cache/allocator/base.py"
TORCH_NATIVE = "sglang/srt/layers/attention/torch_native_backend.py"
CUDA_GRAPH_RUNNER = "sglang/srt/model_executor/cuda_graph_runner.py"
DECODE_RUNNER = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"


@dataclass(frozen=True)
class Step:
    """Where one step's code is: the file inside the tree and the definition run from it."""

    file: str
    name: str


@dataclass(frozen=True)
class AttentionStep:
    """The attention step: the release's own ``TorchNativeAttnBackend`` (the backend SGLang runs on CPU),
    its cross-attention ``forward_extend`` and ``forward_decode`` on the batch the other steps laid out."""

    backend: Step
    helpers: tuple[Step, ...] = ()
    """Definitions the backend imports from another file, run as the release's own where it imports them
    (``KVWriteLoc`` from 0.5.14 on; 0.5.13 passes the bare location)."""


ATTENTION_STAND_INS: tuple[tuple[str, str], ...] = (
    ("token_to_kv_pool (MHATokenToKVPool; its __init__ needs the platform, envs and the KV quant method)",
     "one NaN-poisoned K and V buffer per layer, [slots, kv heads, head dim] fp32; set_kv_buffer writes "
     "k_cache[loc] = k, the release's own CPU fallback in _set_kv_buffer_impl"),
    ("the backend's own state (TorchNativeAttnBackend.__init__ is not run)",
     "the release's req_to_token pool and the stand-in token_to_kv_pool, no sliding-window pool"),
    ("the cross-attention layer (RadixAttention)", "layer 0: is_cross_attention, the heads, head dim "
     "and scaling of a transformers Whisper or Mllama config; no sliding window"),
    ("ForwardBatch", "the release's own extend output (seq_lens, extend_lens, prefix_lens, encoder_lens, "
     "encoder_out_cache_loc) and its decode lengths, as the read side lays them out"),
    ("the earlier request a cached prefix came from", "its slots handed out before the extend's; where the "
     "prefix covers the encoder, its encoder K/V written at them by the harness"),
)
"""What stands in for the attention step, in every range that runs it (docs/engine.md)."""

NATIVE_CROSS = AttentionStep(Step(TORCH_NATIVE, "TorchNativeAttnBackend"), (Step(MEMORY_POOL, "KVWriteLoc"),))
NO_NATIVE_CROSS = (f"{TORCH_NATIVE}: TorchNativeAttnBackend has no cross-attention path in this range "
                   "(_run_sdpa_forward_decode reads req_to_token[req_pool_idx, :seq_len_kv], line 166 of "
                   "0.5.12.post1, with no encoder_lens or is_cross_attn: the encoder part of the shared row "
                   "is never addressed); it came in 0.5.13")


@dataclass(frozen=True)
class StartupStep:
    """The start-up batches: the CUDA-graph runner's dummy decode batch, through the release's own FA3
    capture and replay metadata and ``forward_decode`` (:mod:`crossattn_sizing.engine.sglang.startup`)."""

    runners: tuple[Step, ...]
    """The runner's ``__init__``, whose statements setting the dummy lengths
    (:data:`~crossattn_sizing.engine.sglang.startup.FILL_ATTRIBUTES`) run as the release's own: the first of
    these whose file the tree holds (the runner moved within a range: 0.5.14 has it under ``runner/``)."""
    entry: str = "init_forward_metadata_out_graph"
    """FlashAttentionBackend's capture and replay entry (``in_capture=True`` for the capture)."""

    def runner(self, root: Path) -> Step:
        """Where the tree at ``root`` keeps the runner (the first of :attr:`runners` whose file it holds;
        the last where it holds none, so the "not run" names it)."""
        return next((s for s in self.runners if (root / s.file).is_file()), self.runners[-1])


STARTUP_STAND_INS: tuple[tuple[str, str], ...] = (
    ("the capture sizes (get_batch_sizes_to_capture, --cuda-graph-bs)", "drawn: every size at most "
     "--max-running-requests, the largest sizing the release's own init_cuda_graph_state buffers"),
    ("the runner's input buffers (DecodeInputBuffers.create / the runner's __init__)",
     "the dummy decode batch as they lay it: req_pool_indices zeros (row 0), seq_lens the release's "
     "seq_len_fill_value, encoder_lens its encoder_len_fill_value (both from its own statements), "
     "positions and out_cache_loc zeros"),
    ("the model config the runner reads (hf_config.max_source_positions, is_encoder_decoder)",
     "an encoder-decoder model whose config declares max_source_positions drawn, or none"),
    ("the rows the dummy requests read (req_to_token)", "the release's ReqToTokenPool, each column holding a "
     "distinct slot so a column read is identifiable (a server's rows hold zeros at capture)"),
    ("the capture itself (capture_one_shape, the graph and the model forward)", "FlashAttentionBackend's "
     "capture entry called directly, then its forward_decode for a self- and a cross-attention layer with "
     "the kernel recorded; replay: the same entry without in_capture, on the same dummy batch (what a "
     "padded slot of a smaller batch replays)"),
)
"""What stands in for the start-up batches, in every range that runs them (docs/engine.md)."""

NO_STARTUP = ("the capture path before 0.5.13 (FlashAttentionBackend."
              "init_forward_metadata_capture_cuda_graph and the runner's encoder fill) is not in the "
              "harness's table")


@dataclass(frozen=True)
class SglangRange:
    """Releases ``first`` .. ``last`` (inclusive, as version tuples compare): their steps and stand-ins."""

    first: str
    last: str
    steps: dict[str, Step]
    kernel: Step
    """``normal_decode_set_metadata``: the replay path's Triton metadata kernel (Triton's interpreter)."""
    sizing_takes_server_args: bool
    """Whether ``get_req_to_token_extra_context_len`` takes ``server_args`` (a stand-in: no speculative
    decoding, page size 1) or reads the server settings itself (stood in by the settings getters)."""
    stand_ins: tuple[tuple[str, str], ...] = field(default=())
    """Stand-ins this range needs beyond :data:`COMMON_STAND_INS`: ``(piece, what stands in)``."""
    helpers: tuple[Step, ...] = field(default=())
    """Functions the backend imports from another file, run as the release's own where the tree has them
    (a recorded tree may leave one out: any use of it is then "not run", naming it)."""
    input_ids_are_lists: bool = False
    """Whether ``prepare_encoder_info_extend`` takes each request's ids as a list (0.5.12 and older) or an
    ``array('q')``."""
    admission: dict[str, Step] = field(default_factory=lambda: dict(ADMISSION))
    """The scheduler's admission rule, run as the release's own (:data:`ADMISSION`): loaded when the write
    side first asks, so a piece missing here leaves the write side "not run" and the read side running."""
    attention: AttentionStep | str = NATIVE_CROSS
    """The attention step (the release's ``TorchNativeAttnBackend``), or why this range does not run it
    ("not run", naming the piece)."""

    startup: StartupStep | str = NO_STARTUP
    """The start-up batches' steps, or why this range does not run them ("not run", naming the piece)."""

    def label(self) -> str:
        """The range as docs and reports name it."""
        return self.first if self.first == self.last else f"{self.first} .. {self.last}"


COMMON_STAND_INS: tuple[tuple[str, str], ...] = (
    ("sgl_kernel", "a module whose every function raises if called (CUDA-only kernels; none is called on "
     "the metadata path)"),
    ("platform probes (is_cuda, is_hip, is_npu, is_xpu, _is_* flags)", "False: this is a CPU"),
    ("server settings (get_spec, get_schedule, get_parallel, max_speculative_num_draft_tokens, "
     "get_alloc_page_size)", "no speculative decoding, page size 1, no DCP"),
    ("TorchMemorySaverAdapter", "a region that does nothing (no memory saver)"),
    ("is_pin_memory_available / flatten_arrays_to_pinned_cpu", "no pinned memory; a flat int64 CPU tensor"),
    ("the tree cache and its token allocator", "the next free slots in order, nothing to evict"),
    ("alloc_for_extend (the extend's write into req_to_token)",
     "the harness writes the slots the extend allocated at columns [0, E + prompt) of each row, "
     "and each earlier decode step's slot where the release's decode rule puts it (encoder_lens + "
     "seq_lens), through the row guard; the lengths are the release's extend output"),
    ("the backend's own state (FlashAttentionBackend.__init__ is not run)",
     "the attributes a plain decode reads: page size 1, no speculative decoding, no sliding window, no local "
     "attention, no unified MLA pool, a KV index translator that does not translate (the passthrough its "
     "own build_index_table returns then)"),
    ("AttentionBackend (base class)", "an empty class: only FlashAttentionBackend's own methods run"),
    ("flash_attn_with_kvcache (the attention kernel FlashAttentionBackend.forward_decode calls)",
     "a recorder: every argument the backend passes, kept for the read judge; its output is zeros"),
    ("token_to_kv_pool on the decode path, paged_kv_view / paged_view",
     "one zero K and V buffer of [slots, 1 KV head, 4], viewed as pages of one slot"),
    ("the decode layers (RadixAttention) and AttentionType",
     "a self-attention and a cross-attention layer of 2 query heads on 1 KV head of size 4, no sliding "
     "window, no logit cap; AttentionType with DECODER and ENCODER_ONLY"),
    ("the backend's kernel settings (FlashAttentionBackend.__init__ is not run)",
     "FA3 (fa_impl_ver 3), num_splits 0, KV cache dtype auto (no FP8 descale), no static max_seqlen_k"),
    ("ForwardMode", "the release's own enum, executed alone from model_executor/forward_batch_info.py"),
    ("the worker and scheduler state the admission steps read (their `self`)",
     "the server drawn: context_len and a KV pool of kv_capacity tokens, one running request, page size 1, "
     "no DCP, no dLLM, no SGLANG_MAX_NEW_TOKENS_LIMIT, no sliding window; a KV allocator with only the "
     "release's own BaseTokenToKVPoolAllocator.max_new_tokens_for_memory (where the tree has it); every "
     "field declared with a server's value in engine/sglang/stand_in_fields.py"),
    ("which of get_worker_info's values are the limits", "the 5th and 6th (max_req_len, max_req_input_len), "
     "as every release's scheduler.py unpacks them"),
    ("a request as the admission steps see it (Req)", "origin_input_ids of encoder + prompt tokens (the "
     "encoder part counted in the input, as pad_input_ids expands it for Mllama and Whisper), "
     "origin_input_ids_unpadded of the prompt's tokens alone (as Req.__init__ keeps them before the "
     "padding), sampling_params with the drawn max_new_tokens; every field declared with a server's value "
     "in engine/sglang/stand_in_fields.py"),
    ("the read side's admission", "the harness's model of tp_worker.py (max_req_len = min(context_len - 1, "
     "kv_capacity - 1), max_req_input_len = max_req_len - 5): the read side's batches are drawn admitted by "
     "it; the write side's by the release's own rule (ADMISSION)"),
)
"""Stand-ins every range uses, for the ready line and docs/engine.md."""

ADMISSION: dict[str, Step] = {
    "limits_init": Step(TP_WORKER, "TpModelWorker.__init__"),
    "limits": Step(TP_WORKER, "TpModelWorker.get_worker_info"),
    "input_check": Step(MANAGER_UTILS, "validate_input_length"),
    "output_cap": Step(SCHEDULER, "Scheduler.init_req_max_new_tokens"),
    "pool_budget": Step(ALLOCATOR_BASE, "BaseTokenToKVPoolAllocator.max_new_tokens_for_memory"),
}
"""Where SGLang decides what it admits, in every release of the table (0.5.10.post1 .. 0.5.23):

- ``limits_init``: the statements of ``TpModelWorker.__init__`` that set ``self.max_req_len`` and
  ``self.max_req_input_len``, where it has them (0.5.13.post1 and older compute the limits there; later
  releases in ``get_worker_info``); run alone, the rest of ``__init__`` is not;
- ``limits``: ``get_worker_info``, whose 5th and 6th values the scheduler takes as ``max_req_len`` and
  ``max_req_input_len``;
- ``input_check``: ``validate_input_length``, which aborts an input (encoder tokens included) of
  ``max_req_input_len`` or more;
- ``output_cap``: ``init_req_max_new_tokens``, which caps ``max_new_tokens`` (``max_req_len - input - 1``
  and the pool's budget);
- ``pool_budget``: the pool's budget, called by ``init_req_max_new_tokens`` from 0.5.21 on; run as the
  release's own where the tree has it (an older release does not call it).
"""

_OWN = {
    "pool": Step(MEMORY_POOL, "ReqToTokenPool"),
    "extend_strip": Step(SCHEDULE_BATCH, "ScheduleBatch.prepare_encoder_info_extend"),
    "forward_mode": Step(FORWARD_BATCH_INFO, "ForwardMode"),
    "metadata": Step(FA3, "FlashAttentionBackend"),
    "replay": Step(FA3, "FlashAttentionBackend._apply_cuda_graph_metadata"),
}

RANGES: tuple[SglangRange, ...] = (
    SglangRange(
        "0.5.22", "0.5.23",
        {**_OWN, "row_width": Step(ALLOCATION_SIZING, "get_req_to_token_extra_context_len"),
         "decode_rule": Step(ALLOCATION, "alloc_for_decode_default")},
        Step("sglang/kernels/ops/attention/metadata.py", "normal_decode_set_metadata"),
        sizing_takes_server_args=False,
        helpers=(Step("sglang/kernels/ops/attention/utils.py", "assert_buffer_fits"),),
        startup=StartupStep((Step(DECODE_RUNNER, "DecodeCudaGraphRunner.__init__"),)),
    ),
    SglangRange(
        "0.5.18", "0.5.21",
        {**_OWN, "row_width": Step(ALLOCATION_SIZING, "get_req_to_token_extra_context_len"),
         "decode_rule": Step(ALLOCATION, "alloc_for_decode")},
        Step("sglang/kernels/ops/attention/metadata.py", "normal_decode_set_metadata"),
        sizing_takes_server_args=False,
        helpers=(Step("sglang/kernels/ops/attention/utils.py", "assert_buffer_fits"),),
        startup=StartupStep((Step(DECODE_RUNNER, "DecodeCudaGraphRunner.__init__"),)),
    ),
    SglangRange(
        "0.5.16", "0.5.17",
        {**_OWN, "row_width": Step(ALLOCATION_SIZING, "get_req_to_token_extra_context_len"),
         "decode_rule": Step(ALLOCATION, "alloc_for_decode")},
        Step("sglang/kernels/ops/attention/metadata.py", "normal_decode_set_metadata"),
        sizing_takes_server_args=True,
        stand_ins=(("server_args (get_req_to_token_extra_context_len's argument)",
                    "no speculative decoding, page size 1"),),
        helpers=(Step("sglang/kernels/ops/attention/utils.py", "assert_buffer_fits"),),
        startup=StartupStep((Step(DECODE_RUNNER, "DecodeCudaGraphRunner.__init__"),)),
    ),
    SglangRange(
        "0.5.13", "0.5.15.post1",
        {**_OWN, "row_width": Step(COMMON, "get_req_to_token_extra_context_len"),
         "decode_rule": Step(COMMON, "alloc_for_decode")},
        Step("sglang/srt/layers/attention/triton_ops/metadata.py", "normal_decode_set_metadata"),
        sizing_takes_server_args=True,
        stand_ins=(("server_args (get_req_to_token_extra_context_len's argument)",
                    "no speculative decoding, page size 1"),),
        helpers=(Step("sglang/srt/layers/attention/utils.py", "assert_buffer_fits"),),
        startup=StartupStep((Step(DECODE_RUNNER, "DecodeCudaGraphRunner.__init__"),
                             Step(CUDA_GRAPH_RUNNER, "CudaGraphRunner.__init__"))),
    ),
    SglangRange(
        "0.5.10", "0.5.12.post1",
        {**_OWN, "decode_rule": Step(COMMON, "alloc_for_decode"),
         "replay": Step(FA3, "FlashAttentionBackend.init_forward_metadata_replay_cuda_graph")},
        Step(FA3, "normal_decode_set_metadata"),
        sizing_takes_server_args=True,
        stand_ins=(("the row width (model_runner_kv_cache_mixin.py computes it inline: no function to run)",
                    "context_len + 4, the release's own constant (extra_max_context_len = 4 without "
                    "speculative decoding)"),),
        input_ids_are_lists=True,
        attention=NO_NATIVE_CROSS,
    ),
)
"""Newest first. Between ranges a file moved, a function was renamed, or the row sizing stopped taking
``server_args``; within one the harness runs the same definitions from the same files."""

AUDIT_RELEASES: tuple[str, ...] = (
    "0.5.10.post1", "0.5.11", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15.post1",
    "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23",
)
"""What ``audit --engine sglang`` runs: the last build of every release from 0.5.10 on (and 0.5.13, the
first with the per-request gather, beside its post release)."""

_VERSION_LINE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M)


def version_key(version: str) -> tuple[int, ...]:
    """``0.5.15.post1`` -> ``(0, 5, 15, 0, 1)``: how releases order in the table
    (:func:`crossattn_sizing.releases.versions.series_key`: a pre-release or build of X counts as X); a
    text that is no release number (an odd ``_version.py``) orders before every release."""
    return series_key(version) or ()


def tree_version(root: Path) -> str | None:
    """The version ``sglang/_version.py`` records (wheels carry it; a checkout may not)."""
    path = root / VERSION_FILE
    if not path.is_file():
        return None
    found = _VERSION_LINE.search(path.read_text(errors="replace"))
    return found.group(1) if found else None


def _has(root: Path, step: Step) -> bool:
    path = root / step.file
    if not path.is_file():
        return False
    cls, _, method = step.name.partition(".")
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except SyntaxError:
        return True  # the file is there: its syntax error is reported when it is run, with its line
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == cls:
            return not method or any(getattr(n, "name", None) == method for n in node.body)
    return False


def range_for(root: Path) -> tuple[SglangRange, str]:
    """The range whose table applies to the tree at ``root``, and how it was chosen (for the ready line).

    A version older than the table, or a folder holding none of SGLang's files, is bad input
    (:class:`ReleaseUnavailable`, one line); a tree without a version file that holds some of the steps
    but matches no range has moved or renamed one: an :class:`AdapterGap` naming it ("not run").
    """
    version = tree_version(root)
    if version is not None and series_key(version) is not None:
        key = version_key(version)
        for rng in RANGES:
            if version_key(rng.first) <= key <= version_key(rng.last):
                return rng, f"sglang {version} (sglang/_version.py): release range {rng.label()}"
        if key > version_key(RANGES[0].last):
            rng = RANGES[0]
            return rng, (f"sglang {version} (sglang/_version.py) is newer than the table's last release "
                         f"{rng.last}: run with range {rng.label()}'s steps")
        raise ReleaseUnavailable(
            f"{root}: sglang {version} is older than the first release the harness runs "
            f"({RANGES[-1].first}); see docs/engine.md, 'SGLang', to add a release range"
        )
    for rng in RANGES:
        if all(_has(root, s) for s in (*rng.steps.values(), rng.kernel)):
            return rng, f"no sglang/_version.py: the tree holds every step of release range {rng.label()}"
    newest = RANGES[0]
    steps = (*newest.steps.values(), newest.kernel)
    missing = next(s for s in steps if not _has(root, s))
    message = (f"{root}: the tree has no sglang/_version.py and matches no release range; for the newest "
               f"({newest.label()}) it lacks {missing.name} in {missing.file}")
    if not any((root / s.file).is_file() for s in steps):  # none of SGLang's files: not a tree it runs
        raise ReleaseUnavailable(message)
    # An SGLang tree with a step renamed or moved: the harness's table does not reach it (not run).
    raise AdapterGap(missing.name, f"{message} (renamed or moved in this tree?)", missing.file)


FIRST_OVERFLOW = "0.5.13"
"""The first release whose FA3 decode gather reads past a row, as ``audit --engine sglang`` found it (running
each release's own code; docs/engine.md): an expectation for ``verify``, never a verdict."""

KNOWN_READ_FAILURES = frozenset(f"sglang=={v}" for v in AUDIT_RELEASES[AUDIT_RELEASES.index(FIRST_OVERFLOW):])
"""Releases whose read side is expected to fail (the known finding, docs/spec.md §10); any other release
or tree is expected to hold, as a user's own policy is."""

FIRST_STARTUP_OVERFLOW = "0.5.13"
"""The first release whose CUDA-graph capture dummy request can be longer than its row: from 0.5.13 the runner
fills every dummy request's encoder length with the model config's ``max_source_positions``, whatever the
context length (found running each release's own code; docs/engine.md): an expectation for ``verify``,
never a verdict."""

KNOWN_STARTUP_FAILURES = frozenset(
    f"sglang=={v}" for v in AUDIT_RELEASES[AUDIT_RELEASES.index(FIRST_STARTUP_OVERFLOW):])
"""Releases whose capture property is expected to fail (a server whose context length is below its model's
``max_source_positions``)."""
