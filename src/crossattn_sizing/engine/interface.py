"""The one protocol every engine family implements, and the data it declares (no engine imported here).

An engine family (``vllm``, ``sglang``, ``tensorrt_llm``) is one sub-package of
:mod:`crossattn_sizing.engine` whose ``family.py`` defines ``FAMILY``, an
:class:`EngineFamily`, and one line of :data:`crossattn_sizing.engine.registry.ENGINES`.
The commands reach an engine only through that registry and this protocol, so
``--engine NAME==X`` and ``--engine NAME@PATH`` mean the same in every command:

- the spec is checked (bad input: one line, exit 2) by :meth:`EngineFamily.check_spec`;
- an engine whose release answers the harness's own sizing-policy and
  implementation interface (vLLM) gives a :meth:`EngineFamily.subject_spec`,
  and every command runs as with ``--policy SPEC --impl SPEC``;
- otherwise the engine answers the properties' questions in its own worker,
  and a command runs what :meth:`EngineFamily.verify_suite` (its property
  files, or a property taking the engine's sizer) and
  :meth:`EngineFamily.command` give it;
- an option that does not apply is refused with the reason
  :meth:`EngineFamily.refused` gives, never ignored.

Which steps run as the engine's own code and what stands in are declared per
release range as data (:class:`ReleaseRange`), for docs/engine.md, the ready
line and the reports.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

EngineCommand = Callable[[str, argparse.Namespace], int]
"""An engine's own run of a command: ``(spec, args) -> exit status``."""


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

    def covers(self, version: tuple[int, ...]) -> bool:
        """Whether release ``version`` (as integers) lies in this range."""
        low = version_key(self.first)
        return low <= version and (self.last is None or version <= version_key(self.last))


def version_key(text: str) -> tuple[int, ...]:
    """``"0.5.23"`` as ``(0, 5, 23)``: release numbers compared as numbers (a suffix such as ``rc1``
    or ``.post1`` is ignored)."""
    found = re.match(r"\d+(\.\d+)*", text.strip())
    return tuple(int(x) for x in found.group(0).split(".")) if found else ()


@dataclass(frozen=True)
class EngineSuite:
    """What ``verify --engine SPEC`` runs for an engine that answers in its own worker."""

    files: tuple[str, ...]
    """Property files of the suite (``properties/...``) the engine's questions come from."""
    pytest_args: tuple[str, ...]
    """The plugin options that point those properties at the engine (e.g. ``--read-builder SPEC``)."""
    known_failures: frozenset[str] = field(default_factory=frozenset)
    """Properties this release is known to fail (the finding the harness exists for): a failure of
    one of these is the harness working, any other failure is unexpected."""
    heading: str = ""
    """One line saying what of the engine's code the verdicts are about."""
    sizer: Callable[[float | None], Any] | None = None
    """For an engine whose own code sizes a pool the properties judge (TensorRT-LLM's cross pool): its sizer,
    given ``--call-timeout`` (None: the default deadline), its worker started. The suite's property then
    takes that sizer (``sizer=``) instead of a policy, and is run by
    :mod:`crossattn_sizing.runs.cross_pool_verify`, not through pytest, into the same report as any
    suite's; None for every other suite."""
    startup_files: tuple[str, ...] = ()
    """Property files judging the engine's start-up batches (warm-up, CUDA-graph capture), through its own
    code: ``verify`` runs them beside :attr:`files` (and says so in its notes); ``report`` does not, having
    no tracker template for their findings yet (docs/reporting.md)."""
    startup_not_run: str = ""
    """Why the engine's start-up batches (warm-up, profiling, CUDA-graph capture) are not run for this tree,
    printed as their own "not run" row; "" where the suite's files judge them (or say nothing of them)."""


class EngineFamily(Protocol):
    """One engine family, as every command sees it."""

    name: str
    """The ``NAME`` of ``NAME==X`` and ``NAME@PATH``."""
    ranges: tuple[ReleaseRange, ...]
    """Per release range: what runs as the engine's own code, what stands in."""

    def check_spec(self, spec: str, option: str = "--engine") -> str:
        """``spec`` stripped and checked without obtaining the release; raise a HarnessError naming
        ``option`` (one line, exit 2) for a version that cannot be one or a path without the package."""
        ...

    def subject_spec(self, spec: str) -> str | None:
        """The ``--policy``/``--impl`` spec that runs this engine's own code, when its release answers
        the harness's sizing-policy and implementation interface; None when it answers in its own worker."""
        ...

    def refused(self, command: str) -> Mapping[str, str]:
        """``option flag -> why it does not apply`` with ``command --engine`` of this family."""
        ...

    def obtain(self, spec: str, call_timeout: float | None = None) -> str:
        """Obtain the release now (download, unpack, start its worker), so bad input is one line before
        any property runs; a note for the user ("" when none). ``call_timeout``: the seconds one call into
        the engine's worker may take (``--call-timeout``; None: its setting)."""
        ...

    def subject_lines(self, policy: Any, scenario: Any) -> list[str]:
        """What ``reproduce --engine`` adds about a model's scenario run under a subject engine's policy
        (vLLM: the request through its own block tables and kernel); [] for other engines."""
        ...

    def verify_suite(self, spec: str) -> EngineSuite | None:
        """What ``verify --engine spec`` runs: property files through pytest, or a property given the engine's
        sizer (:attr:`EngineSuite.sizer`); None: the engine runs as a subject, :meth:`subject_spec`."""
        ...

    def command(self, name: str) -> EngineCommand | None:
        """The engine's own run of command ``name`` (check, map, reproduce, audit, fuzz), or None: the
        command runs it as a subject, or refuses (:meth:`unsupported`)."""
        ...

    def unsupported(self, name: str) -> str:
        """Why command ``name`` cannot run this engine (one line), when it has no way to."""
        ...
