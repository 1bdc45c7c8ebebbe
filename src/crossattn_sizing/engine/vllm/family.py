"""vLLM as an engine family (:class:`~crossattn_sizing.engine.interface.EngineFamily`).

vLLM's release answers the harness's own interfaces: its sizing code is a
sizing policy and its kernels are an implementation
(:mod:`crossattn_sizing.engine.vllm.adapters`). So ``--engine vllm==X`` in any
command is ``--policy vllm==X --impl vllm==X`` there: the same suite, the same
verdicts, the same report. An option that would give the policy or the
implementation a second answer is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crossattn_sizing.base.errors import ReleaseUnavailable, shown
from crossattn_sizing.engine.interface import EngineCommand, EngineMode, OtherModes, ReleaseRange
from crossattn_sizing.engine.specs import TREE_PREFIX, tree_root

AS_SUBJECT = "--engine vllm sets --policy and --impl to the release's own code"
"""Why ``--policy``/``--impl`` beside ``--engine vllm...`` are refused: two answers to one question."""

SGLANG_ONLY = "takes an SGLang server's figures; vLLM's release sizes its own rows from the config"


class VllmFamily(OtherModes):
    """``vllm``, ``vllm==X``, ``vllm@PATH``: the release as a sizing policy and an implementation."""

    name = "vllm"
    mode = EngineMode.SUBJECT
    ranges = (
        ReleaseRange(
            "0.21.0", None,
            own_code=(
                "vllm/v1/worker/gpu/model_runner.py: GPUModelRunner.initialize_kv_cache (to the end of its "
                "sizing loop)",
                "vllm/v1/worker/gpu/block_table.py: BlockTables (append, staged writes, gather, slots)",
                "vllm/v1/attention/ops/triton_reshape_and_cache_flash.py: the KV write",
                "vllm/v1/attention/backends/triton_attn.py: the metadata builder and unified_attention",
                "merge of DCP partials: cp_lse_ag_out_ar / merge_attn_states",
                "start-up batches: model_runner.py GPUModelRunner._dummy_run (to its model forward), "
                "input_batch.py InputBatch.make_dummy, block_table.py BlockTables.get_dummy_slot_mappings, "
                "model_states/encoder_decoder.py the max_encoder_len expression (where the release has it)",
            ),
            stand_ins=(
                ("start-up: execute_model", "the model forward: records the dummy SchedulerOutput _dummy_run "
                 "hands it; the dispatch is eager (no request padding: make_dummy gets _dummy_run's count)"),
                ("start-up: SchedulerOutput, random_uuid, PAD_SLOT_ID, InputBuffers, the runner's self",
                 "make_empty and the fields set on it; distinct ids; -1; CPU tensors; only the attributes "
                 "_dummy_run reads before its forward (engine/vllm/startup.py)"),
                ("start-up: warm-up sizes", "the end of the default compile range (max_num_batched_tokens) "
                 "and the capture sizes given; capture lays out make_dummy(min(n, max_num_seqs), n)"),
                ("start-up: ModelRunner V1's _dummy_run", "not run (not executed by the adapter; audit's "
                 "V1 start-up column says so)"),
                ("paged attention with DCP (C > 1)", "decode_attention_fwd, the Triton MLA decode kernel: "
                 "the LSE-returning backends the engine would use are CUDA-only"),
                ("the model runner's self", "only the attributes the sizing reads"),
                ("UvaBuffer, PIN_MEMORY, device capability", "CPU shims (docs/engine.md, the compatibility "
                 "layer)"),
            ),
        ),
        ReleaseRange(
            "0.19.0", "0.20.0", own_code=(), note="not run: their V2 sizing is not a loop in "
            "initialize_kv_cache (audit reads them from the source)",
        ),
    )  # fmt: skip

    def check_spec(self, spec: str, option: str = "--engine") -> str:
        """``vllm``, ``vllm==X.Y.Z`` (normalised) or ``vllm@PATH`` (a folder holding ``vllm/``), checked
        without obtaining the release; anything else is one :class:`ReleaseUnavailable` line."""
        from crossattn_sizing.releases.sources import check_version

        spec = spec.strip()
        if spec == "vllm":
            return spec
        if spec.startswith(TREE_PREFIX):
            try:
                tree_root(spec)
            except ReleaseUnavailable as exc:
                raise ReleaseUnavailable(f"{option} {exc}") from None
            return spec
        if not spec.startswith("vllm=="):
            raise ReleaseUnavailable(f"{option} {shown(spec)}: expected vllm, vllm==X.Y.Z or vllm@PATH")
        try:
            return "vllm==" + check_version(spec.removeprefix("vllm=="))
        except ReleaseUnavailable:
            raise ReleaseUnavailable(
                f"{option} {shown(spec)}: not a release (expected e.g. vllm==0.24.0)"
            ) from None

    def subject_spec(self, spec: str) -> str:
        """The spec itself: vLLM's release is the policy and the implementation."""
        return spec.strip()

    def policy(self, spec: str, deadline: float | None = None) -> Any:
        """The release's own sizing, executed in its worker (:class:`~.adapters.VllmPolicy`)."""
        from crossattn_sizing.engine.vllm.adapters import load_engine_policy

        return load_engine_policy(spec, deadline)

    def impl(self, spec: str, device: Any, deadline: float | None = None) -> Any:
        """The release's own kernels on ``device`` (:class:`~.adapters.VllmImpl`)."""
        from crossattn_sizing.engine.vllm.adapters import load_engine_impl

        return load_engine_impl(spec, device, deadline)

    def tree(self, spec: str) -> Path:
        """The tree itself, or the release's wheel unpacked in the engine cache."""
        from crossattn_sizing.engine.install import resolve_release

        release = resolve_release(spec)
        return Path(release.tree) if release.tree is not None else Path(release.paths[0])

    def report_facts(self) -> Any:
        """:data:`crossattn_sizing.engine.vllm.report_facts.FACTS`."""
        from crossattn_sizing.engine.vllm.report_facts import FACTS

        return FACTS

    @property
    def executed_runners(self) -> Mapping[str, tuple[str, str]]:
        """The runners whose sizing the adapter executes (:data:`~.sizing_exec.EXECUTED_RUNNERS`)."""
        from crossattn_sizing.engine.vllm.sizing_exec import EXECUTED_RUNNERS

        return EXECUTED_RUNNERS

    def executed_policy(
        self, version: str, runner: str, *, wheel_cache: Path | None, offline: bool | None
    ) -> Any:
        """Release ``version``'s (``X``, ``vllm==X`` or ``vllm@PATH``) ``runner`` sizing, its worker
        started on CPU with the audit's wheel cache (audit's executed path,
        :mod:`crossattn_sizing.audit.executed`)."""
        from crossattn_sizing.engine.client import worker_for
        from crossattn_sizing.engine.vllm.adapters import VllmPolicy, normalise

        spec = normalise(version)  # a bare X is vllm==X
        worker = worker_for(spec, "cpu", wheel_cache=wheel_cache, offline=offline)
        return VllmPolicy(spec, worker=worker, runner=runner)

    def refused(self, command: str) -> Mapping[str, str]:
        """``--policy``/``--impl`` everywhere (the engine sets both); SGLang's server figures in check."""
        out = {"--policy": AS_SUBJECT, "--impl": AS_SUBJECT}
        if command in ("check", "map"):
            out["--context-len"] = SGLANG_ONLY
        if command == "check":
            out |= {"--kv-capacity": SGLANG_ONLY, "--requests": SGLANG_ONLY}
        return out

    def obtain(self, spec: str, call_timeout: float | None = None) -> str:
        """Nothing yet: the release is obtained when the command resolves it as its policy."""
        return ""

    def subject_lines(self, policy: Any, scenario: Any) -> list[str]:
        """The scenario's request through the release's own block tables and slot-mapping kernel."""
        from crossattn_sizing.engine.vllm.coverage import coverage_lines

        return coverage_lines(policy, scenario)

    def command(self, name: str) -> EngineCommand | None:
        """None: every command runs vLLM's release as its policy (and implementation)."""
        return None

    def unsupported(self, name: str) -> str:
        """vLLM runs in every command."""
        return ""


FAMILY = VllmFamily()
