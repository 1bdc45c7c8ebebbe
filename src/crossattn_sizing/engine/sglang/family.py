"""SGLang as an engine family (:class:`~crossattn_sizing.engine.interface.EngineFamily`).

SGLang's release does not answer the harness's sizing-policy interface: its
row is shared by the encoder and the decoder tokens, and what can go wrong is
the read side (the decode metadata a backend gathers). So it answers the
properties' questions in its own worker (:mod:`crossattn_sizing.engine.sglang.worker`):
``verify`` runs the read-coverage properties with ``--read-builder SPEC``;
``check``, ``map`` and ``reproduce mllama-mixed-batch`` judge one batch
(:mod:`crossattn_sizing.engine.sglang.check`); ``audit`` runs each release's
own code into the release table (:mod:`crossattn_sizing.engine.sglang.audit`).
What runs as the release's own code and what stands in is :data:`RANGES`,
built from :mod:`crossattn_sizing.engine.sglang.releases` (docs/engine.md, "SGLang").
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.engine.interface import EngineCommand, EngineMode, EngineSuite, OtherModes, ReleaseRange
from crossattn_sizing.engine.sglang import releases
from crossattn_sizing.engine.sglang.releases import (
    ATTENTION_STAND_INS,
    COMMON_STAND_INS,
    KNOWN_READ_FAILURES,
    KNOWN_STARTUP_FAILURES,
    STARTUP_STAND_INS,
    AttentionStep,
    SglangRange,
    StartupStep,
)
from crossattn_sizing.engine.sglang.source import RELEASE_PREFIX, TREE_PREFIX, sglang_tree_root

READ_PROPERTY = "test_gathers_stay_in_row_and_own_columns"
PROPERTY_FILE = "properties/test_read_coverage.py"
ATTENTION_FILE = "properties/sglang_attention.py"
"""The attention property: the release's own TorchNativeAttnBackend against the reference (not a ``test_``
module: it takes an SGLang tree, which only ``verify --engine`` and the tests hand it)."""
STARTUP_FILE = "properties/sglang_startup.py"
"""The start-up properties: the CUDA-graph runner's dummy batches through the release's own capture code
(taking a tree, as the attention property does)."""
CAPTURE_PROPERTY = "test_capture_batches_fit_their_rows"
REPLAY_PROPERTY = "test_padded_replay_fits_its_rows"


def _release_range(rng: SglangRange, newest: bool) -> ReleaseRange:
    """One row of :data:`~crossattn_sizing.engine.sglang.releases.RANGES` as the protocol states it."""
    attention = rng.attention
    steps = (*rng.steps.values(), rng.kernel, *rng.helpers, *rng.admission.values())
    if isinstance(attention, AttentionStep):
        steps += (attention.backend, *attention.helpers)
    own = tuple(f"{s.file.removeprefix('sglang/')}: {s.name}" for s in steps)
    note = "runs where the release keeps these files and definitions; a piece it moved or renamed is "
    note += "'not run', naming it"
    if newest:
        note = f"a release after {rng.last} runs with these steps; {note}"
    if isinstance(attention, str):
        note += f"; the attention property is not run: {attention}"
    if isinstance(rng.startup, StartupStep):
        steps += rng.startup.runners
    else:
        note += f"; the start-up properties are not run: {rng.startup}"
    attention_stand_ins = ATTENTION_STAND_INS if isinstance(attention, AttentionStep) else ()
    startup_stand_ins = STARTUP_STAND_INS if isinstance(rng.startup, StartupStep) else ()
    stand_ins = (*COMMON_STAND_INS, *rng.stand_ins, *attention_stand_ins, *startup_stand_ins)
    return ReleaseRange(rng.first, None if newest else rng.last, own, stand_ins=stand_ins, note=note)


RANGES = tuple(_release_range(rng, i == 0) for i, rng in enumerate(releases.RANGES))
"""Per release range, what runs as SGLang's own code and what stands in: built from the one table,
:data:`crossattn_sizing.engine.sglang.releases.RANGES` (newest first)."""

NOT_THE_ENGINE = "SGLang's release answers in its own worker; it is not a sizing policy or an implementation"
CPU_ONLY = "SGLang's metadata builder runs on CPU in its own worker (Triton interpreted)"
ONE_WORKER = "the engine's questions go to one worker process per release"
IN_PROCESS = "SGLang's code always runs in its own worker process (its calls under --call-timeout)"
CHECK_FORM = "check --engine sglang judges one batch: --context-len, --kv-capacity, --requests"
PAGE_SIZE = "SGLang's table is drawn at page size 1, one column per token"
SLICE = ("this release takes a slice and asserts one request per batch (FA3 eager path): it refuses a batch "
         "of several requests there (that path is not run for it); the CUDA-graph replay path is judged on "
         "the whole batch")
MIXED_BATCH = "reproduce --engine sglang runs mllama-mixed-batch, its shape from a transformers config"


class SglangFamily(OtherModes):
    """``sglang==X`` (the release's wheel, unpacked) and ``sglang@PATH`` (a tree)."""

    name = "sglang"
    mode = EngineMode.PROPERTIES
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

    def property_fixture(self, spec: str, deadline: float | None = None) -> Any:
        """The read-side judge of the tree (:class:`~.client.SglangReads`), its worker started now (a tree
        that cannot load raises here, one line); the attention property asks it for
        :meth:`~.client.SglangReads.attention`."""
        from crossattn_sizing.engine.sglang.client import SglangReads, sglang_worker

        sglang_worker(spec, deadline)
        return SglangReads(spec, deadline=deadline)

    def tree(self, spec: str) -> Path:
        """The tree itself, or the release's wheel unpacked in the engine cache."""
        from crossattn_sizing.engine.sglang.install import resolve_sglang

        return sglang_tree_root(spec) if spec.strip().startswith(TREE_PREFIX) else resolve_sglang(
            spec.strip())[0]

    def report_facts(self) -> Any:
        """:data:`crossattn_sizing.engine.sglang.report_facts.FACTS`."""
        from crossattn_sizing.engine.sglang.report_facts import FACTS

        return FACTS

    def refused(self, command: str) -> Mapping[str, str]:
        """The options no SGLang run takes, by command."""
        out = {"--policy": NOT_THE_ENGINE, "--impl": NOT_THE_ENGINE, "--in-process": IN_PROCESS}
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

    def obtain(self, spec: str, call_timeout: float | None = None) -> str:
        """The release resolved (downloaded and unpacked once) and its worker started; its note: the
        release range it runs with, and, where its own eager path takes a slice (observed, not looked up),
        that it refuses a batch of several requests on its eager path (judged on replay, whole)."""
        from crossattn_sizing.engine.client import EngineCrash
        from crossattn_sizing.engine.sglang.client import sglang_worker

        worker = sglang_worker(spec, call_timeout)
        notes = [str(getattr(worker.release, "note", ""))]
        if worker.ready.get("range"):
            notes.append(f"release: {worker.ready['range']} (engine/sglang/releases.py: the steps run as its "
                         "code)")
        try:
            path = worker.request("fa3_path").get("path")
        except (EngineCrash, ReleaseUnavailable):  # the tree's own code did not answer: its verdicts say so
            path = None
        if path == "slice":
            notes.append(SLICE)
        return "; ".join(n for n in notes if n)

    def verify_suite(self, spec: str) -> EngineSuite:
        """The read-coverage properties, their metadata builder the release's own, and the attention
        property through the release's own TorchNativeAttnBackend."""
        known: frozenset[str] = frozenset()
        if spec.strip() in KNOWN_READ_FAILURES:  # the replay's text gather is the read side's overflow
            known |= {READ_PROPERTY, REPLAY_PROPERTY}
        if spec.strip() in KNOWN_STARTUP_FAILURES:
            known |= {CAPTURE_PROPERTY}
        return EngineSuite(
            files=(PROPERTY_FILE, ATTENTION_FILE),
            startup_files=(STARTUP_FILE,),
            pytest_args=("--read-builder", spec.strip()),
            known_failures=known,
            heading=f"{spec.strip()}: SGLang's own decode metadata builder and TorchNativeAttnBackend "
                    "(docs/engine.md)",
        )

    def command(self, name: str) -> EngineCommand | None:
        """check, map and reproduce judge one batch through the release's own builder; audit runs each
        release's own code into the release table (:mod:`crossattn_sizing.engine.sglang.audit`)."""
        from crossattn_sizing.engine.sglang import audit, check

        commands: dict[str, EngineCommand] = {
            "check": check.run_check_command,
            "map": check.run_map,
            "reproduce": check.run_reproduce,
            "audit": audit.run_audit_command,
        }
        return commands.get(name)

    def unsupported(self, name: str) -> str:
        """fuzz has no SGLang run yet."""
        if name == "fuzz":
            return "fuzz runs sizing policies; for SGLang run verify --engine with a larger --max-examples"
        return f"{name} has no SGLang run"


FAMILY = SglangFamily()
