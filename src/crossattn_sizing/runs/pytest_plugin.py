"""The harness's pytest plugin: options that choose what is under test, and their fixtures.

``--policy`` picks the sizing policy (a built-in name or
``module:attr``), ``--impl`` the accelerator implementation, ``--device`` where
it runs. ``--regressions`` and ``--record-regressions`` say where the regression
files are read and whether new ones are written (``fuzz`` passes them: options
reach the run as options, never through the process's environment). Bad values
stop the run at start-up with one line (a usage error), not a failure inside
every test.

Installed, the plugin is loaded by every pytest run on the machine, so it stays
out of the way: it only registers its options and fixtures until the run is a
harness run (a conftest in it sets ``crossattn_sizing_harness = True``, as the
suite's and the clone's do, or ``--pyargs`` names the suite). Only then does it
check the ``CROSSATTN_*`` variables, register and load the Hypothesis profiles,
and print anything. A run's state (its regression files, the policy, the last
usage error) lives in ``config.stash``, as Hypothesis's own plugin keeps its.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from crossattn_sizing.base import interrupts
from crossattn_sizing.base import settings as env
from crossattn_sizing.base.callables import check_findable, load_callable
from crossattn_sizing.base.errors import (
    HarnessError,
    OptionError,
    PolicyCallError,
    bounded,
    refuse_spelling,
    shown,
)
from crossattn_sizing.base.once import ONCE_ACTIONS
from crossattn_sizing.core.policies import Policy
from crossattn_sizing.engine.specs import is_engine_spec
from crossattn_sizing.runs import profiles
from crossattn_sizing.specs.resolve import Isolation, check_engine_spec, is_user_spec, resolve_policy

IMPL_NAMES = ("torch", "triton")
"""Built-in implementation names, known here without importing torch (see impl.BUILTIN_IMPLS)."""

HARNESS_FLAG = "crossattn_sizing_harness"
"""A conftest whose module sets this to True makes the run a harness run (see the module docstring)."""

SUITE_PACKAGE = "crossattn_sizing.properties"
"""The property suite's name in an installed wheel: ``pytest --pyargs crossattn_sizing.properties``."""


@dataclass(frozen=True)
class RegressionFiles:
    """``--regressions`` and ``--record-regressions`` of a run; None: not given (the variable decides)."""

    folder: Path | None = None
    record: bool | None = None

    def folder_or(self, default: Path) -> Path:
        """Where regression files are read and written: ``--regressions``, else the user's
        ``CROSSATTN_REGRESSIONS_DIR``, else ``default``."""
        return self.folder or env.regressions_dir(default) or default

    def recording(self) -> bool:
        """Whether a new shrunk failure is written as a regression file: ``--record-regressions``, else
        the user's ``CROSSATTN_RECORD_REGRESSIONS``."""
        return self.record if self.record is not None else env.record_regressions()


@dataclass
class HarnessRun:
    """What one harness run carries from start-up to its tests, kept in ``config.stash[RUN]``."""

    regressions: RegressionFiles
    policy: Policy | None = None
    engine_budget: str = ""
    isolation: Isolation | None = None
    sigint: contextlib.ExitStack | None = None
    configured: bool = False


@dataclass(frozen=True)
class ResolvedPolicy:
    """A policy the caller already resolved (``verify``: its plan's subject), handed to an in-process run
    as a plugin so ``--policy`` is not resolved a second time: the same loaded object (a ``module:attr``'s
    worker, a release's) answers the plan's checks and the properties. Used only when ``spec`` is the
    run's ``--policy`` as typed."""

    spec: str
    policy: Policy


def resolved_policy(config: pytest.Config) -> Policy:
    """The run's ``--policy``: the :class:`ResolvedPolicy` handed in for it, else resolved now."""
    spec = config.getoption("sizing_policy")
    for plugin in config.pluginmanager.get_plugins():
        if isinstance(plugin, ResolvedPolicy) and plugin.spec == spec:
            return plugin.policy
    return resolve_policy(spec, config.stash[RUN].isolation).loaded


RUN = pytest.StashKey[HarnessRun]()
USAGE_ERROR = pytest.StashKey[str]()
"""The message of the run's usage error, for in-process callers
(:func:`crossattn_sizing.runs.suite.run_suite`): pytest prints it to stderr, which they do not capture."""


def usage_error(config: pytest.Config, message: str) -> pytest.UsageError:
    """A usage error (pytest exit 4, one ``ERROR:`` line), kept in the run's stash for in-process callers."""
    message = bounded(message)
    config.stash[USAGE_ERROR] = message
    return pytest.UsageError(message)


def last_usage_error(config: pytest.Config) -> str:
    """The usage error this run raised, if any: the CLI prints it as one line instead of pytest's."""
    return config.stash.get(USAGE_ERROR, "")


def regression_files(config: pytest.Config) -> RegressionFiles:
    """The run's ``--regressions`` and ``--record-regressions`` (none given outside a harness run)."""
    run = config.stash.get(RUN, None)
    return run.regressions if run is not None else RegressionFiles()


def wanted(config: pytest.Config) -> bool:
    """Whether this pytest run is the harness's: a loaded conftest says so, or ``--pyargs`` names the
    suite. A suite conftest found only while collecting joins later (:func:`join`); a bad input met
    then is still one usage error, reported by pytest as the conftest's collection error."""
    for plugin in config.pluginmanager.get_plugins():
        if getattr(plugin, HARNESS_FLAG, False) is True:
            return True
    if config.getoption("pyargs", False):
        return any(_holds_the_suite(str(arg).split("::")[0]) for arg in config.args)
    return False


def _holds_the_suite(name: str) -> bool:
    """Whether ``--pyargs name`` collects the suite: the suite, a module of it, or a package above it."""
    inside = name == SUITE_PACKAGE or name.startswith(SUITE_PACKAGE + ".")
    return inside or SUITE_PACKAGE.startswith(name + ".")


PLUGIN_OPTIONS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("--policy",), dict(
        dest="sizing_policy",
        default=None,  # CROSSATTN_SIZING_POLICY, else mrv2: read (and checked) in pytest_configure
        help="sizing policy under test: a built-in name or module:attr (default: mrv2)",
    )),
    (("--impl",), dict(
        default=None,  # CROSSATTN_IMPL, else torch
        help="implementation under test: torch, triton, or module:attr (default: torch)",
    )),
    (("--device",), dict(
        default=None,  # CROSSATTN_DEVICE, else cpu
        # Checked in pytest_configure, not by choices=: pytest prints its full usage text for an
        # argparse error, where every other bad input gets one line.
        help="device the implementation runs on: cpu or cuda (default: cpu)",
    )),
    (("--dcp-backend",), dict(
        default=None,  # CROSSATTN_DCP_BACKEND, else inprocess
        # Checked in pytest_configure, like --device: one line instead of pytest's usage text.
        help="DCP ranks of the attention properties: one process (inprocess, default), or one "
        "torch.distributed worker per rank (gloo on CPU, nccl on CUDA)",
    )),
    (("--dcp-timeout",), dict(
        default=None,  # CROSSATTN_DCP_TIMEOUT, else 120: checked in pytest_configure, like the variable
        help="seconds a distributed DCP rank may take to answer before it counts as hung (default 120)",
    )),
    (("--call-timeout",), dict(
        default=None,  # CROSSATTN_CALL_TIMEOUT, else 60: checked in pytest_configure, like the variable
        help="seconds one call into a module:attr policy or implementation may take in its worker "
        "process before it is killed and the case fails (default 60)",
    )),
    (("--in-process",), dict(
        action="store_true",
        default=None,  # CROSSATTN_IN_PROCESS, else no
        help="UNSAFE, for a debugger: run module:attr code inside the judge's process (the verdict is "
        "then not isolated from it)",
    )),
    # An option beats its variable both ways: this one overrides CROSSATTN_IN_PROCESS=1.
    (("--no-in-process",), dict(
        action="store_false", dest="in_process", default=None,
        help="run module:attr code in its worker process (the default; overrides CROSSATTN_IN_PROCESS)",
    )),
    (("--regressions",), dict(
        default=None,  # CROSSATTN_REGRESSIONS_DIR, else properties/regressions
        help="folder of regression files to replay, and to write new ones to (default: the suite's own)",
    )),
    (("--record-regressions",), dict(
        action="store_true",
        default=None,  # CROSSATTN_RECORD_REGRESSIONS, else no
        help="write each new shrunk capacity failure as a regression file (what fuzz does)",
    )),
    (("--no-record-regressions",), dict(
        action="store_false", dest="record_regressions", default=None,
        help="write no regression file (the default; overrides CROSSATTN_RECORD_REGRESSIONS)",
    )),
    (("--read-builder",), dict(
        default="bounded",  # checked by the read_builder fixture: one line, not pytest's usage text
        help="metadata builder the read-side property judges: bounded, sglang-fa3 (the harness's models), "
             "sglang==X or sglang@PATH (the release's own FlashAttentionBackend) (default: bounded)",
    )),
)
"""The plugin's options (names, argparse settings): added to pytest's parser, and read again by
:func:`refuse_repeated_options`, so the two never disagree on which options there are."""


def pytest_addoption(parser: pytest.Parser) -> None:
    """The options naming what is under test (policy, implementation, device, DCP backend) and how."""
    group = parser.getgroup("crossattn-sizing")
    for names, settings in PLUGIN_OPTIONS:
        group.addoption(*names, **settings)
    refuse_spelling(group.addoption, "--sizing-policy", "--policy")


def refuse_repeated_options(args: Sequence[str]) -> None:
    """Refuse a plugin option typed twice on the command line (``--policy v1 --policy mrv2``).

    pytest's parser keeps the last value silently, and it parses the command line several times, so
    the refusal cannot live in an argparse action there. The command line as typed is read here once
    more, by a parser holding only this plugin's options with the actions every command's parser uses
    (:data:`~crossattn_sizing.base.once.ONCE_ACTIONS`): the same rule and the same line.
    ``PYTEST_ADDOPTS`` and the ini's ``addopts`` are not read: a value typed on the command line
    overriding one of those is how pytest is meant to be used.
    """
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for name, action in ONCE_ACTIONS.items():
        parser.register("action", name, action)
    for names, settings in PLUGIN_OPTIONS:
        parser.add_argument(*names, **{k: v for k, v in settings.items() if k in ("action", "dest")})
    parser.parse_known_args([str(arg) for arg in args])


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """A harness run starts here: its variables, profiles and ``--hypothesis-profile`` are checked before
    any plugin is configured (Hypothesis's own plugin loads the profile in its ``pytest_configure``, where
    an unknown name is an INTERNALERROR). Any other pytest run is left as it is."""
    if wanted(config):
        start(config)


def start(config: pytest.Config) -> None:
    """Check what a harness run needs before configuring, and open its state (once per run)."""
    if RUN in config.stash:
        return
    try:  # a bad variable first: the profiles cannot be registered when CROSSATTN_DB names a file
        env.check_environment()
        profiles.register_profiles()
        files = _regression_files_of(config)
    except HarnessError as exc:
        raise usage_error(config, str(exc)) from None
    _check_profile(config, config.getoption("hypothesis_profile", None))
    config.stash[RUN] = HarnessRun(files)  # last: a usage error above leaves no state


def join(config: pytest.Config) -> None:
    """A harness conftest found while collecting (not named on the command line) starts the run now.

    A run started from the command line is left to this plugin's own ``pytest_configure``: it runs
    last, after Hypothesis's plugin has loaded ``--hypothesis-profile``, whose database the run's
    scope must wrap (a conftest's hook runs before both).
    """
    if RUN in config.stash:
        return
    start(config)
    configure_run(config)


def _check_profile(config: pytest.Config, name: str | None) -> None:
    if name is None:
        return
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    try:
        settings.get_profile(name)
    except InvalidArgument:
        known = ", ".join(env.PROFILES)
        rule = f"unknown Hypothesis profile; use one of {known}"
        raise usage_error(config, f"--hypothesis-profile {shown(name)}: {rule}") from None


@pytest.hookimpl(trylast=True)  # after Hypothesis's plugin has loaded --hypothesis-profile
def pytest_configure(config: pytest.Config) -> None:
    """Configure a harness run (not a plain pytest run that merely has the plugin installed)."""
    if RUN in config.stash:
        configure_run(config)


def configure_run(config: pytest.Config) -> None:
    """Read and check what is under test (once per run): policy, implementation, device, DCP backend."""
    run = config.stash[RUN]
    if run.configured:
        return
    run.configured = True
    # SIGINT is recorded, so a policy raising KeyboardInterrupt is told from the user's Ctrl-C.
    run.sigint = contextlib.ExitStack()
    run.sigint.enter_context(interrupts.recording())
    # Over pytest's hook (set up before this one) and left there: pytest's own clean-up collects
    # garbage after this plugin's, where a recorded press can still land, then puts its old hook back.
    interrupts.wrap_unraisable_hook()
    quiet_frames(config)
    try:
        env.check_environment()  # every CROSSATTN_* variable, each like the option it stands for
        refuse_repeated_options(config.invocation_params.args)
        _option_defaults(config)
        from crossattn_sizing.fleet.database import check_reachable, redis_url, scope_current_profile

        if redis_url():
            check_reachable(redis_url())  # type: ignore[arg-type]
        if config.getoption("hypothesis_profile", None) is None:
            from hypothesis import settings

            settings.load_profile(profiles.selected_profile())
        _read_seconds(config, "call_timeout")
        run.isolation = isolation_of(config)
        run.policy = resolved_policy(config)
        # Stored examples are kept per policy and implementation (see ScopedDatabase).
        scope_current_profile(f"{config.getoption('sizing_policy')}|{config.getoption('impl')}")
        check_impl_spec(str(config.getoption("impl")), run.isolation)
        device = config.getoption("device")
        if device not in env.DEVICES:
            raise OptionError("--device", repr(device), f"use one of {', '.join(env.DEVICES)}")
        if device == "cuda":
            from crossattn_sizing.base.devices import require_device

            require_device("cuda")
        backend = config.getoption("dcp_backend")
        if backend not in env.DCP_BACKENDS:
            raise OptionError("--dcp-backend", repr(backend), f"use one of {', '.join(env.DCP_BACKENDS)}")
        if backend == "nccl" and device != "cuda":
            raise OptionError("--dcp-backend", "'nccl'", "needs --device cuda (gloo is the CPU backend)")
        _read_seconds(config, "dcp_timeout")
        if is_engine_spec(str(config.getoption("impl"))) and device == "cpu":
            from crossattn_sizing.engine.budget import load_engine_budget

            run.engine_budget = load_engine_budget()
    except HarnessError as exc:
        raise usage_error(config, str(exc)) from None


def quiet_frames(config: pytest.Config) -> None:
    """A failure's traceback shows each frame's source line, never its arguments' values, unless the user
    chose a style (``--tb``) or asked for locals (``--showlocals``).

    pytest's default (``auto``: long for the test's own frame and the one that raised) prints every
    argument of those frames through ``saferepr``, which formats a tensor's values in full before it
    cuts the text: an implementation that raised in its kernel call, or changed an input, had its
    caches formatted for minutes before the failure was reported. The diagnosis is the exception's
    own text (shapes, dtypes, the differing elements: :mod:`properties.impl_assertions`).
    """
    if config.getoption("tbstyle", "auto") == "auto":
        config.option.tbstyle = "short"


def _option_defaults(config: pytest.Config) -> None:
    """Options not given on the command line take their environment variable, else the default."""
    readers = {
        "sizing_policy": env.sizing_policy,
        "impl": env.impl,
        "device": env.device,
        "dcp_backend": env.dcp_backend,
        "dcp_timeout": env.dcp_timeout,
        "call_timeout": env.call_timeout,
        "in_process": env.in_process,
    }
    for name, read in readers.items():
        if config.getoption(name) is None:
            setattr(config.option, name, read())


def isolation_of(config: pytest.Config) -> Isolation:
    """Where this run's ``module:attr`` code runs: ``--in-process`` and ``--call-timeout``."""
    return Isolation(bool(config.getoption("in_process")), float(config.getoption("call_timeout")))


def _regression_files_of(config: pytest.Config) -> RegressionFiles:
    """This run's ``--regressions`` (a folder, or one that may be made) and ``--record-regressions``."""
    text = config.getoption("regressions", None)
    folder = None if text is None else Path(text).expanduser()
    if folder is not None and folder.exists() and not folder.is_dir():
        raise OptionError("--regressions", shown(text), "is not a folder; name a folder")
    return RegressionFiles(folder, config.getoption("record_regressions", None))


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the run's Ctrl-C handling, so the next run (or the interpreter) gets its own."""
    run = config.stash.get(RUN, None)
    if run is not None and run.sigint is not None:
        run.sigint.close()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Each test starts with no crash or timeout of the code under test seen (:func:`crossattn_sizing.engine.
    client.forget_breaks`): one bounds the shrinking of the test it happened in, never another's run."""
    client = sys.modules.get("crossattn_sizing.engine.client")  # not imported: no worker, nothing seen
    if client is not None:
        client.forget_breaks()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A policy or implementation that misbehaved inside a test stops the session as a usage error.

    It raised, left the process, faked a Ctrl-C or changed its config
    (:class:`PolicyCallError`, :mod:`crossattn_sizing.base.usercode`): that is the
    user's code being unusable, found late, not a property failing; every
    later test would say the same, so the session ends with one line, exit 4.
    """
    uses = getattr(item, "fixturenames", ())
    harness = RUN in item.config.stash
    if not harness or ("sizing_policy" not in uses and "impl" not in uses):  # not the user's code: as it is
        return (yield)
    try:
        return (yield)
    except PolicyCallError as exc:
        message = usage_error(item.config, str(exc)).args[0]  # kept: an in-process caller says it once
        # Said as a start-up usage error is, on the real stderr (pytest's capture is on here).
        capman = item.config.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
            sys.stderr.write(f"ERROR: {message}\n")
        raise pytest.exit.Exception(message, returncode=pytest.ExitCode.USAGE_ERROR) from None


def pytest_report_header(config: pytest.Config) -> list[str]:
    """For the release's own kernels (``--impl vllm==X``): the function each step runs, one line each.

    Loading it here starts the release's worker, which the first test would
    do anyway; a release that does not load is left to that test to report.
    """
    run = config.stash.get(RUN, None)
    spec = str(config.getoption("impl")).strip()
    if run is None:
        return []
    said = [run.isolation.note] if run.isolation is not None and run.isolation.note else []
    if not is_engine_spec(spec):
        return said
    from crossattn_sizing.specs.resolve import resolve_impl

    lines = [*said, run.engine_budget] if run.engine_budget else said
    try:
        impl = resolve_impl(spec, config.getoption("device"), isolation_of(config))
    except HarnessError as exc:
        return [*lines, f"impl {spec}: not loaded: {exc}"]
    return [*lines, *(f"impl {spec}: {line}" for line in impl.provenance)]


def check_impl_spec(spec: str, isolation: Isolation) -> None:
    """Refuse an ``--impl`` that names nothing at start-up, even when no selected test needs it.

    Only the name is resolved here; building the implementation needs torch and
    waits for the first test that uses it. A ``module:attr`` run in its worker
    is not imported here at all (its import is the user's code too): its form
    is checked, and its worker says at the first test whether it loads.
    """
    if is_engine_spec(spec):  # the release's own code, started by the first test
        check_engine_spec("--impl", spec)  # a release number or a tree that cannot be is refused now
        return
    builtins = dict.fromkeys(IMPL_NAMES, object)
    if is_user_spec(spec) and not isolation.in_process:
        check_findable(spec, builtins, "implementation")
        return
    load_callable(spec, builtins, "implementation")


@pytest.fixture(scope="session")
def sizing_policy(request: pytest.FixtureRequest) -> Policy:
    """The sizing policy chosen with ``--policy``."""
    policy = request.config.stash[RUN].policy
    assert policy is not None  # configure_run loaded it, or stopped the run
    return policy


@pytest.fixture(scope="session")
def sizing_regressions(request: pytest.FixtureRequest) -> RegressionFiles:
    """This run's ``--regressions`` and ``--record-regressions`` (what ``fuzz`` passes)."""
    return regression_files(request.config)


def _read_seconds(config: pytest.Config, dest: str) -> None:
    """Replace a seconds option typed on the command line (text) by its value; bad text is its error."""
    typed = config.getoption(dest)
    if isinstance(typed, str):
        parsed = env.seconds(typed)
        if parsed is None:
            raise OptionError(f"--{dest.replace('_', '-')}", repr(typed), env.SECONDS_RULE)
        setattr(config.option, dest, parsed)


def _typed(option: str, name: str, doc: str) -> Any:
    """A session fixture ``name`` giving the plugin option ``option`` as typed (for rerun lines)."""

    def value(request: pytest.FixtureRequest) -> str:
        return str(request.config.getoption(option))

    value.__doc__ = doc
    return pytest.fixture(scope="session", name=name)(value)


sizing_policy_spec = _typed("sizing_policy", "sizing_policy_spec", "The ``--policy`` value as typed.")
read_builder_name = _typed("read_builder", "read_builder_name", "The ``--read-builder`` value as typed.")
device = _typed("device", "device", "The ``--device`` value.")
impl_spec = _typed("impl", "impl_spec", "The ``--impl`` value as typed.")


@pytest.fixture(scope="session")
def read_builder(request: pytest.FixtureRequest, read_builder_name: str):
    """The metadata builder ``--read-builder`` names: a harness model by name, or an engine's own code
    (``NAME==X``, ``NAME@PATH`` of a family judged through its properties, e.g. ``sglang==X``): the
    family's property fixture (:meth:`~crossattn_sizing.engine.interface.EngineFamily.property_fixture`),
    each call into it under ``--call-timeout``. One that does not load stops the session with one line."""
    from crossattn_sizing.core.read_gather import BUILDERS
    from crossattn_sizing.engine.interface import EngineMode
    from crossattn_sizing.engine.registry import engine_name, family, is_engine

    if is_engine(read_builder_name) and engine_name(read_builder_name) != read_builder_name.strip():
        deadline = float(request.config.getoption("call_timeout"))
        try:
            found = family(engine_name(read_builder_name))
            if found.mode is not EngineMode.PROPERTIES:
                raise OptionError("--read-builder", read_builder_name, f"{found.name}'s code is judged as a "
                                  f"{found.mode.value}, not through the read-side properties")  # fmt: skip
            return found.property_fixture(read_builder_name, deadline)
        except HarnessError as exc:
            pytest.exit(f"--read-builder {read_builder_name!r}: {exc}",
                        returncode=pytest.ExitCode.USAGE_ERROR)
    if read_builder_name not in BUILDERS:
        pytest.exit(f"--read-builder {read_builder_name!r}: must be one of {', '.join(sorted(BUILDERS))}, "
                    "sglang==X or sglang@PATH", returncode=pytest.ExitCode.USAGE_ERROR)
    return BUILDERS[read_builder_name]


@pytest.fixture(scope="session")
def impl(request: pytest.FixtureRequest, impl_spec: str, device: str):
    """The implementation chosen with ``--impl`` on ``--device`` (see docs/implementation-interface.md).

    A spec that does not load stops the whole session with one line: every
    test would fail the same way, so one message says it once.
    """
    from crossattn_sizing.specs.resolve import resolve_impl

    try:
        return resolve_impl(impl_spec, device, isolation_of(request.config)).loaded
    except HarnessError as exc:
        pytest.exit(f"--impl {impl_spec!r}: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


@pytest.fixture(scope="session")
def dcp_runner(request: pytest.FixtureRequest, impl_spec: str, device: str):
    """The runner factory of ``--dcp-backend``: in process, or ranks as torch.distributed workers.

    One pool of worker processes per DCP size, started on first use and reused
    by every example of the session; closed at session end (and at exit).
    """
    from crossattn_sizing.distributed.backend import runner_factory

    option = request.config.getoption
    factory = runner_factory(option("dcp_backend"), impl_spec, device, option("dcp_timeout"))
    yield factory
    close = getattr(factory, "close", None)
    if close is not None:
        close()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No DCP rank outlives the session, whatever the fixtures' teardown did."""
    pool = sys.modules.get("crossattn_sizing.distributed.pool")
    if pool is not None:
        pool.close_all()
