"""How every property fails: a :class:`PropertyFailure` with its diagnosis and a line that replays it.

The suite, ``verify`` and ``fuzz`` read a failure's diagnosis and reproduce
command as values (:mod:`crossattn_sizing.findings.results`); a bare ``assert`` gives
them neither, only ``AssertionError: <text>``. So a property never fails by
``assert``: it calls a helper of the assertion modules (capacity:
:mod:`properties.assertions`, implementations: :mod:`properties.impl_assertions`,
admission: :mod:`properties.admission_assertions`), and those fail here.

A case the ``crossattn-sizing check`` command can replay (a config and encoder
lengths under a policy) gets that command. Any other gets the ``pytest`` line
that reruns the test with the harness options it ran under: Hypothesis replays
the failure from its example database (or its derandomized seed), and the
reports print its shrunk example and ``@reproduce_failure`` beside the line.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NoReturn

import pytest

from crossattn_sizing.core.policies import Policy, policy_name
from crossattn_sizing.findings.results import NOT_RUN_MARK, PropertyFailure
from crossattn_sizing.specs.resolve import typed_spec

if TYPE_CHECKING:  # the capacity properties fail here too, and need no torch
    from crossattn_sizing.impl import Impl


def fail(lines: Sequence[str], reproduce: str) -> NoReturn:
    """Fail with the diagnosis ``lines`` and a command that replays the case by itself."""
    raise PropertyFailure("\n".join(lines), reproduce)


def fail_rerun(lines: Sequence[str], options: Sequence[str] = ()) -> NoReturn:
    """Fail with the diagnosis ``lines`` and the line that reruns this test with ``options``."""
    raise PropertyFailure("\n".join(lines), rerun_command(options), reruns_test=True)


def fail_latent(lines: Sequence[str], reproduce: str, *, reruns_test: bool) -> NoReturn:
    """Report a violation on a case no served request reaches: the property's verdict is ``latent``,
    never ``fails`` (docs/spec.md §12). ``reproduce`` replays it (a ``check`` line, or the test's rerun
    line when ``reruns_test``)."""
    raise PropertyFailure("\n".join(lines), reproduce, reruns_test=reruns_test, latent=True)


def rerun_command(options: Sequence[str] = ()) -> str:
    """``pytest <the running test> <options>``.

    The test is read from ``PYTEST_CURRENT_TEST`` (``<nodeid> (call)``, set by
    pytest while a test runs); outside pytest the line names the suite.
    """
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    nodeid = current.rsplit(" (", 1)[0] if current else "properties"
    return shlex.join(["pytest", nodeid, *options])


def harness_options(impl: Impl, policy: Policy | None = None, dcp_backend: str = "inprocess") -> list[str]:
    """The plugin options a property ran under, for its rerun line (the DCP backend if not the default)."""
    # The specs as typed (a display name or a base class's name cannot be typed back: issue 29).
    out = [] if policy is None else ["--policy", typed_spec(policy, policy_name(policy))]
    out += ["--impl", typed_spec(impl, impl.name), "--device", impl.device.type]
    return out if dcp_backend == "inprocess" else [*out, "--dcp-backend", dcp_backend]


def assert_equal(what: str, got: object, expected: object, context: Sequence[str],
                 options: Sequence[str] = ()) -> None:
    """``got == expected``, else fail: ``context`` (a heading line, then the case), then ``what``
    was compared and both values."""
    if got != expected:
        fail_rerun([*context, f"  {what}: got {got!r}, expected {expected!r}"], options)


def judge_against(expected: Iterable[float], oracle: str) -> None:
    """Refuse to judge against an oracle's output that is not finite: the example is "not run".

    Every comparison treats a NaN as a mismatch (or, in a bound like
    ``err > bound``, as a silent match), so a non-finite expected value
    would blame the code under test for the harness's own oracle (the
    reference, transformers' forward), or pass it unchecked. The oracle's
    inputs are finite, so this never fires unless the oracle itself broke.
    """
    if not all(math.isfinite(x) for x in expected):
        pytest.skip(f"{NOT_RUN_MARK}{oracle} gave a non-finite expected output: the harness's oracle "
                    "broke, so this example judges nothing")
