"""SGLang as an engine family (:class:`~crossattn_sizing.engine.interface.EngineFamily`).

SGLang's release does not answer the harness's sizing-policy interface: its
row is shared by the encoder and the decoder tokens, and what can go wrong is
the read side (the decode metadata a backend gathers). So it answers the
properties' questions in its own worker (:mod:`crossattn_sizing.engine.sglang.worker`):
``verify`` runs the read-coverage properties with ``--read-builder SPEC``;
``check``, ``map`` and ``reproduce mllama-mixed-batch`` judge one batch
(:mod:`crossattn_sizing.engine.sglang.check`). What runs as the release's own
code and what stands in is :data:`RANGES` (docs/engine.md, "SGLang").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.engine.interface import EngineCommand, EngineSuite, ReleaseRange
from crossattn_sizing.engine.sglang.source import RELEASE_PREFIX, TREE_PREFIX, sglang_tree_root

READ_PROPERTY = "test_gathers_stay_in_row_and_own_columns"
PROPERTY_FILE = "properties/test_read_coverage.py"

KNOWN_READ_FAILURES = frozenset({"sglang==0.5.23"})
"""Releases whose FA3 decode gather is known to read past a row (docs/spec.md §10): the read side is
expected to fail there. Any other release or tree is expected to hold, as a user's own policy is."""

OWN_CODE = (
    "mem_cache/allocation_sizing.py: get_req_to_token_extra_context_len (the row width)",
    "mem_cache/memory_pool.py: ReqToTokenPool.__init__ (the table)",
    "managers/schedule_batch.py: ScheduleBatch.prepare_encoder_info_extend",
    "mem_cache/allocation.py: alloc_for_decode_default (the decode location rule)",
    "layers/attention/flashattention_backend.py: FlashAttentionBackend.init_forward_metadata (eager) and "
    "_apply_cuda_graph_metadata (CUDA-graph replay)",
    "kernels/ops/attention/metadata.py: normal_decode_set_metadata (Triton, interpreted)",
    "model_executor/forward_batch_info.py: ForwardMode",
)

RANGES = (
    ReleaseRange(
        "0.5.21", None, OWN_CODE,
        stand_ins=(
            ("sgl_kernel", "a module whose every function raises if called (CUDA-only kernels)"),
            ("platform probes (is_cuda, is_hip, ...)", "False: this is a CPU"),
            ("server settings (speculative decoding, page size, DCP)", "none, page size 1, no DCP"),
            ("TorchMemorySaverAdapter", "a region that does nothing"),
            ("pinned memory", "a flat int64 CPU tensor"),
            ("the tree cache and its token allocator", "the next free slots in order, nothing to evict"),
            ("AttentionBackend (base class)", "an empty class: only FlashAttentionBackend's own methods run"),
            ("every other import", "Missing: any use is 'not run', naming the piece"),
        ),
        note="runs where the release keeps these files and functions; a piece it moved or renamed is "
        "'not run', naming it",
    ),
)  # fmt: skip
"""Per release range, what runs as SGLang's own code and what stands in."""

NOT_THE_ENGINE = "SGLang's release answers in its own worker; it is not a sizing policy or an implementation"
CPU_ONLY = "SGLang's metadata builder runs on CPU in its own worker (Triton interpreted)"
ONE_WORKER = "the engine's questions go to one worker process per release"
USER_CODE = "applies to a module:attr policy or implementation, which --engine sglang does not run"
CHECK_FORM = "check --engine sglang judges one batch: --context-len, --kv-capacity, --requests"
PAGE_SIZE = "SGLang's table is drawn at page size 1, one column per token"
MIXED_BATCH = "reproduce --engine sglang runs mllama-mixed-batch, its shape from a transformers config"


class SglangFamily:
    """``sglang==X`` (the release's wheel, unpacked) and ``sglang@PATH`` (a tree)."""

    name = "sglang"
    ranges = RANGES

    def check_spec(self, spec: str, option: str = "--engine") -> str:
        """``sglang==X`` (a release number) or ``sglang@PATH`` (a folder holding ``sglang/``)."""
        from crossattn_sizing.engine.sglang.install import sglang_version

        spec = spec.strip()
        try:
            if spec.startswith(TREE_PREFIX):
                sglang_tree_root(spec)
                return spec
            if spec.startswith(RELEASE_PREFIX):
                return RELEASE_PREFIX + sglang_version(spec)
        except ReleaseUnavailable as exc:
            raise ReleaseUnavailable(f"{option} {exc}") from None
        raise ReleaseUnavailable(f"{option} {spec!r}: expected sglang==X.Y.Z or sglang@PATH")

    def subject_spec(self, spec: str) -> str | None:
        """None: the release answers in its own worker."""
        return None

    def refused(self, command: str) -> Mapping[str, str]:
        """The options no SGLang run takes, by command."""
        out = {"--policy": NOT_THE_ENGINE, "--impl": NOT_THE_ENGINE, "--call-timeout": USER_CODE,
               "--in-process": USER_CODE}  # fmt: skip
        if command == "verify":
            out |= {"--device": CPU_ONLY, "--jobs": ONE_WORKER}
        if command == "check":
            out |= {"--config": CHECK_FORM, "--encoder-len": CHECK_FORM}
        if command == "map":
            out["--block-size"] = PAGE_SIZE
        if command == "reproduce":
            out |= {flag: MIXED_BATCH for flag in (
                "--config", "--image-size", "--max-model-len", "--block-size", "--dcp", "--encoder-len",
                "--max-num-batched-tokens", "--encoder-budget")}  # fmt: skip
        return out

    def obtain(self, spec: str) -> str:
        """The release resolved (downloaded and unpacked once) and its worker started; its note."""
        from crossattn_sizing.engine.sglang.client import sglang_worker

        return str(getattr(sglang_worker(spec).release, "note", ""))

    def subject_lines(self, policy: Any, scenario: Any) -> list[str]:
        """None: SGLang is never a subject."""
        return []

    def verify_suite(self, spec: str) -> EngineSuite:
        """The read-coverage properties, their metadata builder the release's own."""
        known = frozenset({READ_PROPERTY}) if spec.strip() in KNOWN_READ_FAILURES else frozenset()
        return EngineSuite(
            files=(PROPERTY_FILE,),
            pytest_args=("--read-builder", spec.strip()),
            known_failures=known,
            heading=f"{spec.strip()}: SGLang's own decode metadata builder (docs/engine.md)",
        )

    def command(self, name: str) -> EngineCommand | None:
        """check, map and reproduce judge one batch through the release's own builder."""
        from crossattn_sizing.engine.sglang import check

        commands: dict[str, EngineCommand] = {
            "check": check.run_check_command,
            "map": check.run_map,
            "reproduce": check.run_reproduce,
        }
        return commands.get(name)

    def unsupported(self, name: str) -> str:
        """audit and fuzz have no SGLang run yet."""
        if name == "audit":
            return "the audit reads vLLM's sizing code; SGLang has no release table yet"
        if name == "fuzz":
            return "fuzz runs sizing policies; for SGLang run verify --engine with a larger --max-examples"
        return f"{name} has no SGLang run"


FAMILY = SglangFamily()
