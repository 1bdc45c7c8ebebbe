"""TensorRT-LLM as an engine family (:class:`~crossattn_sizing.engine.interface.EngineFamily`).

TensorRT-LLM keeps cross-attention K/V in a pool of its own, sized once by
``KvCacheCreator._get_cross_kv_cache_layout``; that method answers in its own
worker (:mod:`crossattn_sizing.engine.tensorrt_llm.sizer`), and what is judged
is the cross-pool capacity property, which takes the engine's sizer rather than
a sizing policy. So the family's verify suite is that property and the
tree's sizer (its mode is ``EngineMode.SIZER``: :meth:`TrtllmFamily.sizer`), run by
:mod:`crossattn_sizing.runs.cross_pool_verify` into verify's report (table,
``--json``, ``--junit-xml``, ``--markdown``) and ``report``'s issues
(:mod:`crossattn_sizing.engine.tensorrt_llm.report_facts`); ``check`` and
``reproduce whisper`` judge one request
(:mod:`crossattn_sizing.engine.tensorrt_llm.check`). Only a tree is taken
(``tensorrt_llm@PATH``): the registry's package is a wheel stub without the
Python source (docs/engine.md, "TensorRT-LLM").
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crossattn_sizing.base.errors import ReleaseUnavailable, shown
from crossattn_sizing.engine.interface import EngineCommand, EngineMode, EngineSuite, OtherModes, ReleaseRange
from crossattn_sizing.engine.tensorrt_llm import source
from crossattn_sizing.engine.tensorrt_llm.source import PARAMETERS, QUALNAME, UTIL

PROPERTY_FILE = "properties/cross_pool_capacity.py"

RECORDED_COMMIT = "0004396720054fd8e205cbf616f21f0b57c6b412"
"""The NVIDIA/TensorRT-LLM commit whose ``_util.py`` is recorded (tests/fixtures/tensorrt_llm/README.md)."""

SHAPE = f"{QUALNAME}({', '.join(PARAMETERS)}=None)"
"""The signature the adapter calls; a tree whose method differs is "not run", naming it."""

RANGES = (
    ReleaseRange(
        RECORDED_COMMIT, RECORDED_COMMIT,
        own_code=(
            f"{UTIL}: {SHAPE} (the cross pool's length)",
            f"{UTIL}: KvCacheCreator._get_config_int_attr (which it calls)",
        ),
        stand_ins=(
            ("self", "an instance made without __init__, holding only the HF config, _max_seq_len and "
             "_llm_args.max_input_len the sizing reads"),
            ("every name _util.py imports", "a stand-in that raises naming it when used: 'not run'"),
            ("fallback_max_seq_len", "not passed: the engine passes one only while estimating"),
            ("what a request needs, and admission", "the harness's core/cross_pool.py"),
        ),
        note=f"commits, not releases: any tree whose {UTIL} has {SHAPE} runs; another shape is 'not run', "
        "naming the signature",
    ),
)  # fmt: skip
"""What runs as TensorRT-LLM's own code: the recorded commit and the shape of the method it runs."""

NOT_THE_ENGINE = "TensorRT-LLM's sizing answers in its own worker: it is not a sizing policy or an impl"
ONE_WORKER = "the engine's questions go to one worker process per tree"
IN_WORKER = "the engine's code always runs in its worker"
ONE_PROPERTY = "verify --engine tensorrt_llm runs one property, the cross-pool capacity"
CPU_ONLY = "the cross-pool sizing runs on CPU in its own worker"
CHECK_FORM = "check --engine tensorrt_llm judges one request: --config, --encoder-len"
WHISPER = "reproduce --engine tensorrt_llm runs whisper under TensorRT-LLM's defaults"


class TrtllmFamily(OtherModes):
    """``tensorrt_llm@PATH`` (a tree holding ``tensorrt_llm/``): its cross-pool sizing in a worker."""

    name = "tensorrt_llm"
    mode = EngineMode.SIZER
    ranges = RANGES

    def check_spec(self, spec: str, option: str = "--engine") -> str:
        """``tensorrt_llm@PATH`` (a folder holding ``tensorrt_llm/``); a release is refused in one line."""
        spec = spec.strip()
        if not spec.startswith(source.TREE_PREFIX) and not spec.startswith("tensorrt_llm=="):
            raise ReleaseUnavailable(f"{option} {shown(spec)}: expected tensorrt_llm@PATH")
        try:
            source.tensorrt_llm_tree_root(spec)
        except ReleaseUnavailable as exc:
            raise ReleaseUnavailable(f"{option} {exc}") from None
        return spec

    def sizer(self, spec: str, deadline: float | None = None) -> Any:
        """The tree's own cross-pool sizer (:func:`~.check.cross_pool_sizer`), its worker started."""
        from crossattn_sizing.engine.tensorrt_llm.check import cross_pool_sizer

        return cross_pool_sizer(spec.strip(), deadline)

    def tree(self, spec: str) -> Path:
        """The tree itself (only trees are taken: a release is refused in one line)."""
        return source.tensorrt_llm_tree_root(self.check_spec(spec))

    def report_facts(self) -> Any:
        """:data:`crossattn_sizing.engine.tensorrt_llm.report_facts.FACTS`."""
        from crossattn_sizing.engine.tensorrt_llm.report_facts import FACTS

        return FACTS

    def refused(self, command: str) -> Mapping[str, str]:
        """The options no TensorRT-LLM run takes, by command."""
        out = {"--policy": NOT_THE_ENGINE, "--impl": NOT_THE_ENGINE, "--in-process": IN_WORKER}
        if command == "verify":
            out |= {"--device": CPU_ONLY, "--jobs": ONE_WORKER, "-k": ONE_PROPERTY}
        if command == "check":
            out |= {flag: CHECK_FORM for flag in ("--context-len", "--kv-capacity", "--requests")}
        if command == "reproduce":
            out |= {flag: WHISPER for flag in (
                "--config", "--image-size", "--max-model-len", "--block-size", "--dcp", "--encoder-len",
                "--max-num-batched-tokens", "--encoder-budget")}  # fmt: skip
        return out

    def obtain(self, spec: str, call_timeout: float | None = None) -> str:
        """The tree read and its worker started (a tree without the sizing is one line); no note.

        A file the harness's parser gives up on is no bad input: the suite's sizer meets it again
        and the property is "not run", saying so (:mod:`crossattn_sizing.runs.cross_pool_verify`).
        """
        from crossattn_sizing.core.cross_pool import CrossPoolNotRun
        from crossattn_sizing.engine.tensorrt_llm.sizer import tensorrt_llm_worker

        with contextlib.suppress(CrossPoolNotRun):
            tensorrt_llm_worker(spec, call_timeout)
        return ""

    def verify_suite(self, spec: str) -> EngineSuite:
        """The cross-pool capacity property, given the tree's own :meth:`sizer` (not run through pytest)."""
        from crossattn_sizing.engine.tensorrt_llm.startup import startup_absence

        return EngineSuite(
            files=(PROPERTY_FILE,),
            pytest_args=(),
            heading=f"{spec.strip()}: TensorRT-LLM's own {QUALNAME} (docs/engine.md)",
            startup_not_run=startup_absence(source.tensorrt_llm_tree_root(spec)),
        )

    def command(self, name: str) -> EngineCommand | None:
        """check and reproduce whisper judge one request (verify runs :meth:`verify_suite`)."""
        from crossattn_sizing.engine.tensorrt_llm import check

        commands: dict[str, EngineCommand] = {
            "check": check.run_check,
            "reproduce": check.run_reproduce,
        }
        return commands.get(name)

    def unsupported(self, name: str) -> str:
        """map, audit and fuzz have no TensorRT-LLM run."""
        if name == "map":
            return "map draws a sizing policy's plane; the cross pool has one length per engine"
        if name == "audit":
            return "the audit reads vLLM's sizing code; TensorRT-LLM is a tree only, with no release table"
        if name == "fuzz":
            return "fuzz runs sizing policies; run verify --engine with a larger --max-examples"
        return f"{name} has no TensorRT-LLM run"


FAMILY = TrtllmFamily()
