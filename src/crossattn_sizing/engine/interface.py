"""The one protocol every engine family implements, and the data it declares (no engine imported here).

An engine family (``vllm``, ``sglang``, ``tensorrt_llm``, or one an installed package adds) defines
``FAMILY``, an :class:`EngineFamily`, found by :mod:`crossattn_sizing.engine.registry` (its built-in
lines, or the ``crossattn_sizing.engines`` entry-point group). Nothing outside ``engine/`` imports a
family (tests/test_engine_layering.py): the commands, the pytest plugin and the properties reach one
only through the registry and this protocol, so ``--engine NAME==X`` and ``--engine NAME@PATH`` mean the
same in every command:

- the spec is checked (bad input: one line, exit 2) by :meth:`EngineFamily.check_spec`;
- the family's :attr:`EngineFamily.mode` says how its code is judged (:class:`EngineMode`): as the
  harness's own sizing policy and implementation (:meth:`EngineFamily.policy`, :meth:`EngineFamily.impl`),
  through property files given the family's fixture (:meth:`EngineFamily.property_fixture`), or by a
  property given the family's sizer (:meth:`EngineFamily.sizer`); a method of another mode raises
  :class:`WrongMode` (the caller's bug, never the user's input);
- an option that does not apply is refused with the reason
  :meth:`EngineFamily.refused` gives, never ignored.

Which steps run as the engine's own code and what stands in are declared per
release range as data (:class:`ReleaseRange`), for docs/engine.md, the ready
line and the reports.
"""

from __future__ import annotations

import argparse
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

EngineCommand = Callable[[str, argparse.Namespace], int]
"""An engine's own run of a command: ``(spec, args) -> exit status``."""


class EngineMode(enum.Enum):
    """How an engine family's own code is judged: one mode per family, declared, never inferred."""

    SUBJECT = "subject"
    """Its release answers the harness's sizing-policy and implementation interfaces (vLLM): every command
    runs it as ``--policy SPEC --impl SPEC`` (:meth:`EngineFamily.policy`, :meth:`EngineFamily.impl`)."""
    PROPERTIES = "properties"
    """It answers the properties' questions in its own worker (SGLang): verify runs its property files
    through pytest, each given the family's fixture (:meth:`EngineFamily.property_fixture`)."""
    SIZER = "sizer"
    """Its own code sizes a pool a property judges (TensorRT-LLM's cross pool): verify runs that property
    with the family's sizer (:meth:`EngineFamily.sizer`)."""


class WrongMode(TypeError):
    """A family was asked for a piece of another mode's contract (a caller's bug, not bad input)."""

    def __init__(self, family: str, mode: EngineMode, method: str) -> None:
        super().__init__(f"engine family {family} ({mode.value}) has no {method}: see EngineMode")


@dataclass(frozen=True)
class ReleaseRange:
    """Releases ``first`` .. ``last`` (inclusive; ``last`` None: every later one) and how they run."""

    first: str
    last: str | None
    own_code: tuple[str, ...]
    """The steps run as the release wrote them (``file: function``)."""
    stand_ins: tuple[tuple[str, str], ...] = ()
    """``(piece, what stands in for it and why)``: everything the harness supplies instead."""
    note: str = ""
    """What a user should know of these releases (e.g. "not run: asserts one request per batch")."""


@dataclass(frozen=True)
class EngineSuite:
    """What ``verify --engine SPEC`` runs for a :attr:`EngineMode.PROPERTIES` or :attr:`EngineMode.SIZER`
    family."""

    files: tuple[str, ...]
    """Property files of the suite (``properties/...``) the engine's questions come from."""
    pytest_args: tuple[str, ...]
    """The plugin options that point those properties at the engine (e.g. ``--read-builder SPEC``)."""
    known_failures: frozenset[str] = field(default_factory=frozenset)
    """Properties this release is known to fail (the finding the harness exists for): a failure of
    one of these is the harness working, any other failure is unexpected."""
    heading: str = ""
    """One line saying what of the engine's code the verdicts are about."""
    startup_files: tuple[str, ...] = ()
    """Property files judging the engine's start-up batches (warm-up, CUDA-graph capture), through its own
    code: ``verify`` runs them beside :attr:`files` (and says so in its notes); ``report`` does not, having
    no tracker template for their findings yet (docs/reporting.md)."""
    startup_not_run: str = ""
    """Why the engine's start-up batches (warm-up, profiling, CUDA-graph capture) are not run for this tree,
    printed as their own "not run" row; "" where the suite's files judge them (or say nothing of them)."""


class EngineFamily(Protocol):
    """One engine family, as every command sees it (the whole contract: nothing else of a family is read)."""

    name: str
    """The ``NAME`` of ``NAME==X`` and ``NAME@PATH``."""
    mode: EngineMode
    """How its code is judged; the methods of another mode raise :class:`WrongMode`."""
    ranges: tuple[ReleaseRange, ...]
    """Per release range: what runs as the engine's own code, what stands in."""

    def check_spec(self, spec: str, option: str = "--engine") -> str:
        """``spec`` stripped and checked without obtaining the release; raise a HarnessError naming
        ``option`` (one line, exit 2) for a version that cannot be one or a path without the package."""
        ...

    def refused(self, command: str) -> Mapping[str, str]:
        """``option flag -> why it does not apply`` with ``command --engine`` of this family."""
        ...

    def obtain(self, spec: str, call_timeout: float | None = None) -> str:
        """Obtain the release now (download, unpack, start its worker), so bad input is one line before
        any property runs; a note for the user ("" when none). ``call_timeout``: the seconds one call into
        the engine's worker may take (``--call-timeout``; None: its setting)."""
        ...

    def tree(self, spec: str) -> Path:
        """The folder holding the engine's package for ``spec`` (the tree itself, or the release unpacked in
        the cache, obtained now): what ``report`` quotes and ``report --fix`` copies."""
        ...

    def report_facts(self) -> Any:
        """What ``report`` needs to phrase an issue about this engine (a
        :class:`~crossattn_sizing.engine.report_facts.ReportFacts`), or None: report has no run for it."""
        ...

    # EngineMode.SUBJECT
    def subject_spec(self, spec: str) -> str:
        """The ``--policy``/``--impl`` spec that runs this engine's own code."""
        ...

    def policy(self, spec: str, deadline: float | None = None) -> Any:
        """The release's own sizing as a sizing policy, each call under ``deadline`` seconds."""
        ...

    def impl(self, spec: str, device: Any, deadline: float | None = None) -> Any:
        """The release's own kernels on ``device`` as an implementation, each call under ``deadline``."""
        ...

    def subject_lines(self, policy: Any, scenario: Any) -> list[str]:
        """What ``reproduce --engine`` adds about a model's scenario run under the release's policy (vLLM:
        the request through its own block tables and kernel)."""
        ...

    # EngineMode.PROPERTIES and EngineMode.SIZER
    def verify_suite(self, spec: str) -> EngineSuite:
        """What ``verify --engine spec`` runs: property files through pytest (PROPERTIES), or the property
        given the engine's sizer (SIZER)."""
        ...

    # EngineMode.PROPERTIES
    def property_fixture(self, spec: str, deadline: float | None = None) -> Any:
        """What the properties receive for ``spec`` (the plugin's ``--engine``/``--read-builder``): the
        engine's own judge, its worker started, each call under ``deadline`` seconds; a tree that cannot
        load raises a HarnessError (one line)."""
        ...

    # EngineMode.SIZER
    def sizer(self, spec: str, deadline: float | None = None) -> Any:
        """The engine's own sizer the suite's property takes (``sizer=``), its worker started."""
        ...

    def command(self, name: str) -> EngineCommand | None:
        """The engine's own run of command ``name`` (check, map, reproduce, audit, fuzz), or None: the
        command runs it as a subject, or refuses (:meth:`unsupported`)."""
        ...

    def unsupported(self, name: str) -> str:
        """Why command ``name`` cannot run this engine (one line), when it has no way to."""
        ...


class OtherModes:
    """The pieces of the contract that belong to another mode than a family's, each raising
    :class:`WrongMode`: a family subclasses this and defines the pieces of its own mode."""

    name: str
    mode: EngineMode

    def _wrong(self, method: str) -> WrongMode:
        return WrongMode(self.name, self.mode, method)

    def subject_spec(self, spec: str) -> str:
        """A subject family's (:attr:`EngineMode.SUBJECT`)."""
        raise self._wrong("subject_spec")

    def policy(self, spec: str, deadline: float | None = None) -> Any:
        """A subject family's."""
        raise self._wrong("policy")

    def impl(self, spec: str, device: Any, deadline: float | None = None) -> Any:
        """A subject family's."""
        raise self._wrong("impl")

    def subject_lines(self, policy: Any, scenario: Any) -> list[str]:
        """A subject family's."""
        raise self._wrong("subject_lines")

    def verify_suite(self, spec: str) -> EngineSuite:
        """A family's of :attr:`EngineMode.PROPERTIES` or :attr:`EngineMode.SIZER`."""
        raise self._wrong("verify_suite")

    def property_fixture(self, spec: str, deadline: float | None = None) -> Any:
        """A family's of :attr:`EngineMode.PROPERTIES`."""
        raise self._wrong("property_fixture")

    def sizer(self, spec: str, deadline: float | None = None) -> Any:
        """A family's of :attr:`EngineMode.SIZER`."""
        raise self._wrong("sizer")


class ExecutesSizing(Protocol):
    """A subject family whose audit runs each runner's sizing for real (vLLM: ``audit``'s executed path)."""

    executed_runners: Mapping[str, tuple[str, str]]
    """``runner -> (file, class)`` whose ``initialize_kv_cache`` sizing the adapter executes."""

    def executed_policy(
        self, version: str, runner: str, *, wheel_cache: Path | None, offline: bool | None
    ) -> Any:
        """Release ``version``'s ``runner`` sizing as a policy, its worker started; raises
        :class:`~crossattn_sizing.base.errors.ReleaseUnavailable` or an engine crash when it cannot run."""
        ...
