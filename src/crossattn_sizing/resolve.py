"""Every policy and implementation spec a user types, resolved in one place at the edge.

A spec is a built-in name (``mrv2``, ``torch``), a ``module:attr``, or an
engine release's own code: ``vllm`` (the installed one), ``vllm==X`` or
``vllm@PATH`` (:mod:`crossattn_sizing.engine.specs`). The core modules
(:mod:`crossattn_sizing.core.policies`, :mod:`crossattn_sizing.impl`) know the first
two forms only; the engine forms are sent to :mod:`crossattn_sizing.engine.vllm`
from here, so the core never imports the engine (tests/test_layers.py), and the
commands, the pytest plugin and verify's worker all read specs the same way.
The engine is imported only when a spec names it; :func:`check_engine_spec`
refuses an engine spec that names nothing before any work starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crossattn_sizing.core import policies
from crossattn_sizing.engine.specs import TREE_PREFIX, is_engine_spec, tree_root
from crossattn_sizing.errors import EngineError, shown

if TYPE_CHECKING:
    import torch

    from crossattn_sizing.core.policies import Policy
    from crossattn_sizing.impl import Impl


def load_policy(spec: str) -> Policy:
    """The sizing policy ``spec`` names: built-in, ``module:attr``, or a release's own sizing, executed.

    Raises :class:`~crossattn_sizing.errors.PolicyLoadError` (a built-in or
    ``module:attr`` that does not load) or
    :class:`~crossattn_sizing.errors.EngineError` (a release that cannot be
    obtained or run) with the reason.
    """
    if is_engine_spec(spec):
        from crossattn_sizing.engine.vllm import load_engine_policy

        return load_engine_policy(spec)
    return policies.load_policy(spec)


def load_checked_policy(spec: str) -> Policy:
    """:func:`load_policy`, then :func:`~crossattn_sizing.core.policies.probe_policy`: what every command and
    the plugin use, so a policy that cannot answer fails before any work starts."""
    return policies.probe_policy(load_policy(spec))


def load_impl(spec: str, device: str | torch.device = "cpu") -> Impl:
    """The implementation ``spec`` names on ``device``: built-in, ``module:attr``, or a release's kernels.

    Checked as :func:`crossattn_sizing.impl.load_impl` checks any (device,
    methods, the keywords it must take). Imports torch, so only when called.
    """
    from crossattn_sizing import impl

    if is_engine_spec(spec):  # the release's own kernels (vllm, vllm==X, vllm@PATH)
        from crossattn_sizing.engine.vllm import load_engine_impl

        return impl.load_impl(spec, device, factory=lambda d: load_engine_impl(spec, d))
    return impl.load_impl(spec, device)


def check_engine_spec(option: str, spec: str) -> str:
    """The engine spec typed after ``option``, stripped and checked, without obtaining the release.

    ``vllm`` (the installed one), ``vllm==X.Y.Z`` (a release number; the
    version normalised) or ``vllm@PATH`` (a folder holding ``vllm/``).
    ``reproduce --engine`` and the plugin's ``--impl`` both check here, so one
    spec is refused in the same words wherever it is typed. Raises
    :class:`~crossattn_sizing.audit.sources.FetchError` naming ``option``.
    """
    from crossattn_sizing.audit.sources import FetchError, check_version

    spec = spec.strip()
    if spec == "vllm":
        return spec
    if spec.startswith(TREE_PREFIX):
        try:
            tree_root(spec)
        except EngineError as exc:
            raise FetchError(f"{option} {exc}") from None
        return spec
    if not spec.startswith("vllm=="):
        raise FetchError(f"{option} {shown(spec)}: expected vllm, vllm==X.Y.Z or vllm@PATH")
    try:
        return "vllm==" + check_version(spec.removeprefix("vllm=="))
    except FetchError:
        raise FetchError(f"{option} {shown(spec)}: not a release (expected e.g. vllm==0.24.0)") from None
