"""Every policy and implementation spec a user types, resolved in one place at the edge.

A spec is a built-in name (``mrv2``, ``torch``), a ``module:attr``, or an
engine release's own code: ``vllm`` (the installed one), ``vllm==X`` or
``vllm@PATH`` (:mod:`crossattn_sizing.engine.specs`). The core modules
(:mod:`crossattn_sizing.core.policies`, :mod:`crossattn_sizing.impl`) know the first
two forms only; the engine forms are sent to their family's policy and implementation
(:func:`crossattn_sizing.engine.registry.family_of`) from here, so the core never imports
the engine (tests/test_layers.py), nothing here imports a family, and the
commands, the pytest plugin and verify's worker all read specs the same way.
The engine is imported only when a spec names it; :func:`check_engine_spec`
refuses an engine spec that names nothing before any work starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from crossattn_sizing.base import settings
from crossattn_sizing.base.callables import check_form
from crossattn_sizing.core import policies
from crossattn_sizing.engine.specs import is_engine_spec

if TYPE_CHECKING:
    import torch

    from crossattn_sizing.core.policies import Policy
    from crossattn_sizing.impl import Impl


@dataclass(frozen=True)
class Isolation:
    """Where a ``module:attr`` policy or implementation runs: in a worker process (the default), with a
    deadline per call, or in the judge's own process (``--in-process``: unsafe, for a debugger).

    Built-in policies and implementations run in process either way (they are
    the harness's own code); an engine release runs in its release worker.
    """

    in_process: bool = False
    timeout: float = settings.DEFAULT_CALL_TIMEOUT

    @classmethod
    def from_settings(cls) -> Isolation:
        """``CROSSATTN_IN_PROCESS`` and ``CROSSATTN_CALL_TIMEOUT``, or the defaults."""
        return cls(settings.in_process(), settings.call_timeout())

    def plugin_args(self) -> list[str]:
        """The pytest plugin's options that carry this into a run of the suite."""
        return ["--call-timeout", repr(self.timeout), *(["--in-process"] if self.in_process else [])]

    @property
    def note(self) -> str | None:
        """What a report says about it: nothing when isolated, a warning when not."""
        if self.in_process:
            return ("--in-process: module:attr code ran inside the judge's own process; the verdict is not "
                    "isolated from the code under test")
        return None


def is_user_spec(spec: str) -> bool:
    """Whether ``spec`` names a user's ``module:attr`` (not a built-in or an engine release)."""
    return ":" in spec and not is_engine_spec(spec)


def load_policy(spec: str, isolation: Isolation | None = None) -> Policy:
    """The sizing policy ``spec`` names: built-in, ``module:attr``, or a release's own sizing, executed.

    A ``module:attr`` runs in its worker process unless ``isolation`` says
    in process (:mod:`crossattn_sizing.engine.isolated`); ``None`` reads the
    settings. Raises :class:`~crossattn_sizing.base.errors.PolicyLoadError` (a
    built-in or ``module:attr`` that does not load) or
    :class:`~crossattn_sizing.base.errors.ReleaseUnavailable` (a release that cannot be
    obtained or run) with the reason.
    """
    isolation = isolation or Isolation.from_settings()
    if is_engine_spec(spec):  # the release's own sizing, in its worker, under the same deadline
        from crossattn_sizing.engine.registry import family_of

        return cast("Policy", family_of(spec, "--policy").policy(spec, isolation.timeout))
    if is_user_spec(spec) and not isolation.in_process:
        from crossattn_sizing.engine.isolated import isolated_policy

        check_form(spec, {}, "sizing policy")
        return isolated_policy(spec, isolation.timeout)
    return policies.policy_from_spec(spec)


def load_checked_policy(spec: str, isolation: Isolation | None = None) -> Policy:
    """:func:`load_policy`, then :func:`~crossattn_sizing.core.policies.probe_policy`: what every command and
    the plugin use, so a policy that cannot answer fails before any work starts."""
    return policies.probe_policy(load_policy(spec, isolation))


def load_impl(spec: str, device: str | torch.device = "cpu", isolation: Isolation | None = None) -> Impl:
    """The implementation ``spec`` names on ``device``: built-in, ``module:attr``, or a release's kernels.

    Checked as :func:`crossattn_sizing.impl.impl_from_spec` checks any (device,
    methods, the keywords it must take). A ``module:attr`` runs in its worker
    process unless ``isolation`` says in process. Imports torch, so only when called.
    """
    from crossattn_sizing import impl

    isolation = isolation or Isolation.from_settings()
    if is_engine_spec(spec):  # the release's own kernels (vllm, vllm==X, vllm@PATH), under the same deadline
        from crossattn_sizing.engine.registry import family_of

        deadline, family = isolation.timeout, family_of(spec, "--impl")
        return impl.impl_from_spec(spec, device, factory=lambda d: family.impl(spec, d, deadline))
    if is_user_spec(spec) and not isolation.in_process:
        from crossattn_sizing.engine.isolated import isolated_impl

        check_form(spec, {}, "implementation")
        timeout = isolation.timeout
        return impl.impl_from_spec(spec, device, factory=lambda d: isolated_impl(spec, d, timeout))
    return impl.impl_from_spec(spec, device)


def check_engine_spec(option: str, spec: str) -> str:
    """The vLLM spec typed after ``option``, stripped and checked, without obtaining the release.

    ``vllm`` (the installed one), ``vllm==X.Y.Z`` (a release number; the
    version normalised) or ``vllm@PATH`` (a folder holding ``vllm/``): vLLM's
    family checks it (:meth:`~crossattn_sizing.engine.interface.EngineFamily.check_spec`),
    so one spec is refused in the same words wherever it is typed (``--engine``,
    the plugin's ``--impl``, ``audit``). Raises
    :class:`~crossattn_sizing.releases.sources.ReleaseUnavailable` naming ``option``.
    """
    from crossattn_sizing.engine.registry import family

    return family("vllm").check_spec(spec, option)


@dataclass(frozen=True)
class Subject:
    """One policy or implementation under test, resolved once: what every report and replay line reads.

    ``spec`` is exactly what the user typed, and is what every printed command
    line uses (a display name such as ``vllm==0.25.0 (all four steps vLLM's
    kernels)`` or a base class's ``name`` cannot be typed back); ``loaded`` is
    the object the properties call; ``name`` what a table shows;
    ``expected_to_hold`` what the verdict is measured against; ``provenance``
    an implementation's ``step: function`` lines (empty for a policy, and for
    an implementation that does not say).
    """

    kind: str  # "policy" or "impl"
    spec: str
    loaded: Any
    name: str
    expected_to_hold: bool
    provenance: tuple[str, ...] = ()


def resolve_policy(spec: str, isolation: Isolation | None = None) -> Subject:
    """The policy ``spec`` names, loaded and probed once (:func:`load_checked_policy`), as a :class:`Subject`.

    A built-in says whether it is expected to hold; so may an engine release
    (one before the fix is expected to fail) or a user's object (an
    ``expected_to_hold`` bool attribute); otherwise it is expected to hold,
    since that is what a user asks.
    """
    policy = load_checked_policy(spec, isolation)
    expected = getattr(policy, "expected_to_hold", True)
    name = policies.policy_name(policy) if not is_user_spec(spec) else spec
    return _known(Subject("policy", spec, policy, name, expected if isinstance(expected, bool) else True))


def resolve_impl(
    spec: str, device: str | torch.device = "cpu", isolation: Isolation | None = None
) -> Subject:
    """The implementation ``spec`` names on ``device``, loaded once (:func:`load_impl`): its :class:`Subject`.

    Its ``name`` is its own display name where it is an engine release's
    (which says whose kernels run), else the spec as typed: a ``TorchImpl``
    subclass given as ``mymod:MyImpl`` is ``mymod:MyImpl``, never ``torch``.
    """
    from crossattn_sizing.impl import provenance_lines

    impl = load_impl(spec, device, isolation)
    name = impl.name if is_engine_spec(spec) and isinstance(getattr(impl, "name", None), str) else spec
    return _known(Subject("impl", spec, impl, name, True, tuple(provenance_lines(impl))))


_RESOLVED: dict[int, Subject] = {}
"""Every subject resolved in this process, by its loaded object's id (the subject keeps the object alive,
so the id is not reused while the entry stands)."""


def _known(subject: Subject) -> Subject:
    _RESOLVED[id(subject.loaded)] = subject
    return subject


def subject_of(loaded: object) -> Subject | None:
    """The :class:`Subject` a loaded policy or implementation was resolved as, if it was.

    Why: a property holds the loaded object (its fixture's value), but its
    rerun line must name the spec as typed; this finds the record from the
    object without changing what the properties are handed.
    """
    subject = _RESOLVED.get(id(loaded))
    return subject if subject is not None and subject.loaded is loaded else None


def typed_spec(loaded: object, otherwise: str) -> str:
    """The spec ``loaded`` was resolved from, as typed; ``otherwise`` for an object not resolved here."""
    subject = subject_of(loaded)
    return subject.spec if subject is not None else otherwise
