"""The harness's pytest plugin: options that choose what is under test, and their fixtures.

``--sizing-policy`` picks the sizing policy (a built-in name or
``module:attr``), ``--impl`` the accelerator implementation, ``--device`` where
it runs. Bad values stop the run at start-up with one line (a usage error),
not a failure inside every test.
"""

from __future__ import annotations

import os

import pytest

from crossattn_sizing import profiles
from crossattn_sizing.errors import HarnessError, OptionError
from crossattn_sizing.policies import Policy, load_callable, load_checked_policy

DEVICES = ("cpu", "cuda")
IMPL_NAMES = ("torch", "triton")
"""Built-in implementation names, known here without importing torch (see impl.BUILTIN_IMPLS)."""

profiles.register_profiles()

last_usage_error = ""
"""The message of the last usage error raised at start-up, for in-process callers
(:func:`crossattn_sizing.suite.run_suite`): pytest prints it to stderr, which
they do not capture."""


def usage_error(message: str) -> pytest.UsageError:
    """A usage error (pytest exit 4, one ``ERROR:`` line), remembered for in-process callers."""
    global last_usage_error
    last_usage_error = message
    return pytest.UsageError(message)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("crossattn-sizing")
    group.addoption(
        "--sizing-policy",
        default=os.environ.get("CROSSATTN_SIZING_POLICY", "mrv2"),
        help="sizing policy under test: a built-in name or module:attr (default: mrv2)",
    )
    group.addoption(
        "--impl",
        default=os.environ.get("CROSSATTN_IMPL", "torch"),
        help="implementation under test: torch, triton, or module:attr (default: torch)",
    )
    group.addoption(
        "--device",
        default=os.environ.get("CROSSATTN_DEVICE", "cpu"),
        # Checked in pytest_configure, not by choices=: pytest prints its full usage text for an
        # argparse error, where every other bad input gets one line.
        help="device the implementation runs on: cpu or cuda (default: cpu)",
    )


def pytest_configure(config: pytest.Config) -> None:
    try:
        if config.getoption("hypothesis_profile", None) is None:
            from hypothesis import settings

            settings.load_profile(profiles.selected_profile())
        config._crossattn_policy = load_checked_policy(config.getoption("sizing_policy"))  # type: ignore[attr-defined]
        check_impl_spec(str(config.getoption("impl")))
        device = config.getoption("device")
        if device not in DEVICES:
            raise OptionError("--device", repr(device), f"use one of {', '.join(DEVICES)}")
        if device == "cuda":
            from crossattn_sizing.devices import require_device

            require_device("cuda")
    except HarnessError as exc:
        raise usage_error(str(exc)) from None


def check_impl_spec(spec: str) -> None:
    """Refuse an ``--impl`` that names nothing at start-up, even when no selected test needs it.

    Only the name is resolved here (a ``module:attr`` is imported); building the
    implementation needs torch and waits for the first test that uses it.
    """
    load_callable(spec, dict.fromkeys(IMPL_NAMES, object), "implementation")


@pytest.fixture(scope="session")
def sizing_policy(request: pytest.FixtureRequest) -> Policy:
    """The sizing policy chosen with ``--sizing-policy``."""
    return request.config._crossattn_policy  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def sizing_policy_spec(request: pytest.FixtureRequest) -> str:
    """The ``--sizing-policy`` value as typed, for reproduce commands."""
    return str(request.config.getoption("sizing_policy"))


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> str:
    """The ``--device`` value."""
    return str(request.config.getoption("device"))


@pytest.fixture(scope="session")
def impl_spec(request: pytest.FixtureRequest) -> str:
    """The ``--impl`` value as typed."""
    return str(request.config.getoption("impl"))


@pytest.fixture(scope="session")
def impl(impl_spec: str, device: str):  # type: ignore[no-untyped-def]
    """The implementation chosen with ``--impl`` on ``--device`` (see docs/implementation-interface.md).

    A spec that does not load stops the whole session with one line: every
    test would fail the same way, so one message says it once.
    """
    from crossattn_sizing.impl import load_impl

    try:
        return load_impl(impl_spec, device)
    except HarnessError as exc:
        pytest.exit(f"--impl {impl_spec!r}: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)
