"""Every environment variable the harness reads, read and checked here and nowhere else.

An environment variable is an option the user typed earlier: a bad one is bad
input, one line naming the variable, its value and the rule, like the option
it stands for (exit 2 from the console script, pytest's usage error from the
plugin), never a traceback or a verdict on something that was not checked.
:func:`check_environment` checks every variable that is set; the commands and
the plugin call it before any work, and each reader below checks its own
variable again, so a module used on its own is never fed a bad value either.

One precedence rule for every variable (``docs/settings.md``): an option typed on
the command line beats its variable, which beats the command's default. A reader
here takes that default where commands differ (``verify``'s profile is ``ci``, the
plugin's ``dev``); :func:`is_set` says whether the user set a variable at all.

Only what the user set is read here: the harness never writes these variables
into its own process (``fuzz`` hands its folders to the property suite as the
plugin's options). Values are read when asked for, not at import.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

from crossattn_sizing.base.errors import HarnessError, shown
from crossattn_sizing.base.limits import MAX_INT_DIGITS

# The variables, by what they stand for. ---------------------------------------
SIZING_POLICY = "CROSSATTN_SIZING_POLICY"  # --policy of the pytest plugin
IMPL = "CROSSATTN_IMPL"  # --impl of the pytest plugin
DEVICE = "CROSSATTN_DEVICE"  # --device of the pytest plugin
DCP_BACKEND = "CROSSATTN_DCP_BACKEND"  # --dcp-backend of the pytest plugin
DCP_TIMEOUT = "CROSSATTN_DCP_TIMEOUT"  # --dcp-timeout of the pytest plugin
PROFILE = "CROSSATTN_PROFILE"  # --hypothesis-profile
DB = "CROSSATTN_DB"  # fuzz --db: the local example database folder
SHARED_DB = "CROSSATTN_SHARED_DB"  # a read-only example database folder layered under it
REDIS_URL = "CROSSATTN_REDIS_URL"  # fuzz --redis-url: the fleet's shared database
PROPERTIES = "CROSSATTN_PROPERTIES"  # the property suite's folder
REGRESSIONS_DIR = "CROSSATTN_REGRESSIONS_DIR"  # the plugin's --regressions: files read and written
RECORD_REGRESSIONS = "CROSSATTN_RECORD_REGRESSIONS"  # --record-regressions: write a file per new failure
ENGINE_CACHE = "CROSSATTN_ENGINE_CACHE"  # where vLLM releases are unpacked to run
OFFLINE = "CROSSATTN_OFFLINE"  # audit --offline: never download
ENGINE_WORKERS = "CROSSATTN_ENGINE_WORKERS"  # processes per release for a long batch
FUZZ_WORKER = "CROSSATTN_FUZZ_WORKER"  # set by fuzz --jobs: this process's worker number
ENGINE_EXAMPLES = "CROSSATTN_ENGINE_EXAMPLES"  # examples per property with --impl vllm==X on CPU
FLEET_PARENT = "CROSSATTN_FLEET_PARENT"  # set by fuzz --jobs: the pid a worker dies with
CALL_TIMEOUT = "CROSSATTN_CALL_TIMEOUT"  # --call-timeout: seconds one call into isolated user code may take
IN_PROCESS = "CROSSATTN_IN_PROCESS"  # --in-process: run module:attr code inside the judge (unsafe)
HYPOTHESIS_STORAGE = "HYPOTHESIS_STORAGE_DIRECTORY"  # Hypothesis's own: the folder it keeps its files in

PROFILES = ("dev", "ci", "nightly", "gpu", "replay", "reuse")
DEVICES = ("cpu", "cuda")
DCP_BACKENDS = ("inprocess", "gloo", "nccl")
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off", "")
MAX_DCP_TIMEOUT = 7 * 24 * 3600.0
"""A week: a longer wait for a rank is a typo, and the timer needs a finite one."""
MAX_ENGINE_WORKERS = 256
"""Each worker holds about 0.5 GB; more than this is a typo, not a machine."""


class SettingError(HarnessError, ValueError):
    """An environment variable whose value breaks its rule: ``NAME='value': rule``."""

    def __init__(self, name: str, value: str, rule: str) -> None:
        self.name = name
        self.value = value
        self.rule = rule
        super().__init__(f"{name}={shown(value)}: {rule}")


def raw(name: str) -> str | None:
    """The variable's text, stripped; None when unset or blank (blank reads as unset, as in a shell)."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return None
    return value.strip()


def is_set(name: str) -> bool:
    """Whether the user set ``name`` (blank reads as unset): whether it, not the default, decides."""
    return raw(name) is not None


def _choice(name: str, allowed: tuple[str, ...], default: str) -> str:
    value = raw(name)
    if value is None:
        return default
    if value not in allowed:
        raise SettingError(name, value, f"use one of {', '.join(allowed)}")
    return value


def _flag(name: str) -> bool:
    value = raw(name)
    if value is None:
        return False
    if value.lower() in TRUE:
        return True
    if value.lower() in FALSE:
        return False
    raise SettingError(name, value, "must be 1 or 0 (true/false, yes/no)")


def _count(name: str, minimum: int, maximum: int) -> int | None:
    value = raw(name)
    if value is None:
        return None
    if len(value) > MAX_INT_DIGITS or not value.isdigit() or not minimum <= int(value) <= maximum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise SettingError(name, value, f"must be {what}, at most {maximum}")
    return int(value)


def folder(name: str, value: str) -> Path:
    """A folder a variable names: it may not exist yet, but it is not a file or a device, nor under one.

    ``/dev/null`` as an example database would swallow every example found;
    a plain file would fail on the first save, deep inside Hypothesis.
    """
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise SettingError(name, value, "is not a folder (a file or device); name a folder")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise SettingError(name, value, f"{parent} is a file, not a folder")
            break
    return path


def _optional_folder(name: str) -> Path | None:
    value = raw(name)
    return None if value is None else folder(name, value)


# Readers, one per variable. ------------------------------------------------------
def sizing_policy(default: str = "mrv2") -> str:
    """``--policy`` where it is not typed: ``CROSSATTN_SIZING_POLICY``, else ``default`` (checked when
    the policy loads)."""
    return raw(SIZING_POLICY) or default


def impl(default: str = "torch") -> str:
    """``--impl`` where it is not typed: ``CROSSATTN_IMPL``, else ``default`` (checked when it loads)."""
    return raw(IMPL) or default


def device(default: str = "cpu") -> str:
    """``--device`` where it is not typed: ``CROSSATTN_DEVICE`` (cpu or cuda), else ``default``."""
    return _choice(DEVICE, DEVICES, default)


def dcp_backend() -> str:
    """The DCP backend from ``CROSSATTN_DCP_BACKEND`` (inprocess, gloo or nccl; default inprocess)."""
    return _choice(DCP_BACKEND, DCP_BACKENDS, "inprocess")


def seconds(text: str) -> float | None:
    """A number of seconds in ``(0, MAX_DCP_TIMEOUT]``, or None when the text is not one."""
    try:
        value = float(text) if len(text) <= MAX_INT_DIGITS else math.nan
    except ValueError:
        return None
    return value if math.isfinite(value) and 0 < value <= MAX_DCP_TIMEOUT else None


SECONDS_RULE = f"must be a number of seconds in (0, {MAX_DCP_TIMEOUT:g}]"


def dcp_timeout() -> float:
    """Seconds a distributed DCP rank may take (default 120)."""
    value = raw(DCP_TIMEOUT)
    if value is None:
        return 120.0
    parsed = seconds(value)
    if parsed is None:
        raise SettingError(DCP_TIMEOUT, value, SECONDS_RULE)
    return parsed


DEFAULT_CALL_TIMEOUT = 60.0
"""Seconds one call into a user's policy or implementation may take in its worker process: far past
any sizing answer or CPU kernel call the suite makes (the slowest, an interpreted Triton kernel on a
large case, takes a few seconds), short enough that a hung kernel is reported within a minute."""


def call_timeout() -> float:
    """Seconds one call into isolated user code may take before its worker is killed (default 60)."""
    value = raw(CALL_TIMEOUT)
    if value is None:
        return DEFAULT_CALL_TIMEOUT
    parsed = seconds(value)
    if parsed is None:
        raise SettingError(CALL_TIMEOUT, value, SECONDS_RULE)
    return parsed


def in_process() -> bool:
    """Whether ``module:attr`` code runs in the judge's own process (``--in-process``: unsafe)."""
    return _flag(IN_PROCESS)


def profile(default: str = "dev") -> str:
    """The Hypothesis profile: ``CROSSATTN_PROFILE``, else the reader's ``default`` (the plugin's
    ``dev``, verify's ``ci``)."""
    value = raw(PROFILE)
    if value is not None and value not in PROFILES:
        raise SettingError(PROFILE, value, f"unknown Hypothesis profile; use one of {', '.join(PROFILES)}")
    return value or default


def database_dir(default: Path) -> Path:
    """The local example database folder: ``CROSSATTN_DB``, else ``default``."""
    return _optional_folder(DB) or default


def shared_database_dir() -> Path | None:
    """A read-only example database layered under the local one, if ``CROSSATTN_SHARED_DB`` is set."""
    return _optional_folder(SHARED_DB)


def redis_url() -> str | None:
    """The fleet's database URL (its form is checked where the client is made)."""
    return raw(REDIS_URL)


def properties_dir() -> Path | None:
    """``CROSSATTN_PROPERTIES``, if set (the suite checks that it holds the properties)."""
    return _optional_folder(PROPERTIES)


def regressions_dir(default: Path | None) -> Path | None:
    """Where regression files are read and written: ``CROSSATTN_REGRESSIONS_DIR``, else ``default``."""
    return _optional_folder(REGRESSIONS_DIR) or default


def record_regressions() -> bool:
    """Whether ``CROSSATTN_RECORD_REGRESSIONS`` asks for a regression file per new failure."""
    return _flag(RECORD_REGRESSIONS)


def cache_home() -> Path:
    """``$XDG_CACHE_HOME``, else ``~/.cache``: the base of every cache the harness keeps."""
    value = raw("XDG_CACHE_HOME")
    return folder("XDG_CACHE_HOME", value) if value else Path.home() / ".cache"


def wheel_cache() -> Path:
    """The default wheel cache of ``audit`` and the engine adapter (``--cache-dir`` overrides it)."""
    return cache_home() / "crossattn-sizing" / "wheels"


def hypothesis_home() -> Path:
    """The folder Hypothesis keeps its own files in (its constants cache, Unicode tables, the default
    example database): ``HYPOTHESIS_STORAGE_DIRECTORY``, Hypothesis's own variable, where the user set
    it; else ``hypothesis/`` in the harness's cache. Never Hypothesis's default, ``.hypothesis`` in the
    working folder: ``verify`` run in an engine checkout would leave untracked files there."""
    return _optional_folder(HYPOTHESIS_STORAGE) or cache_home() / "crossattn-sizing" / "hypothesis"


def engine_cache(wheel_cache_dir: Path | None = None) -> Path:
    """Where releases are unpacked to run: ``CROSSATTN_ENGINE_CACHE``; else ``engine/`` inside a wheel
    cache the user named (so ``--cache-dir`` keeps everything in one place); else beside the default
    wheel cache."""
    explicit = _optional_folder(ENGINE_CACHE)
    if explicit is not None:
        return explicit
    if wheel_cache_dir is not None:
        return Path(wheel_cache_dir) / "engine"
    return cache_home() / "crossattn-sizing" / "engine"


def offline() -> bool:
    """Whether ``CROSSATTN_OFFLINE`` forbids downloads (``audit --offline`` for every command)."""
    return _flag(OFFLINE)


def engine_workers() -> int | None:
    """Processes per release for a long batch, if ``CROSSATTN_ENGINE_WORKERS`` says."""
    return _count(ENGINE_WORKERS, 1, MAX_ENGINE_WORKERS)


def fuzz_worker() -> int | None:
    """This fuzzing worker's number under ``fuzz --jobs``, if it is one."""
    return _count(FUZZ_WORKER, 0, 1 << 16)


def engine_examples() -> int | None:
    """Examples per property for a run of a release's own kernels (interpreted: seconds each)."""
    return _count(ENGINE_EXAMPLES, 1, 1 << 20)


def fleet_parent() -> int | None:
    """The pid of the ``fuzz --jobs`` parent this worker must not outlive, if it is one."""
    return _count(FLEET_PARENT, 1, 1 << 31)


READERS: dict[str, Callable[[], object]] = {
    SIZING_POLICY: sizing_policy,
    IMPL: impl,
    DEVICE: device,
    DCP_BACKEND: dcp_backend,
    DCP_TIMEOUT: dcp_timeout,
    PROFILE: profile,
    DB: lambda: _optional_folder(DB),
    SHARED_DB: shared_database_dir,
    REDIS_URL: redis_url,
    PROPERTIES: properties_dir,
    REGRESSIONS_DIR: lambda: _optional_folder(REGRESSIONS_DIR),
    RECORD_REGRESSIONS: record_regressions,
    ENGINE_CACHE: lambda: _optional_folder(ENGINE_CACHE),
    OFFLINE: offline,
    ENGINE_WORKERS: engine_workers,
    FUZZ_WORKER: fuzz_worker,
    FLEET_PARENT: fleet_parent,
    ENGINE_EXAMPLES: engine_examples,
    CALL_TIMEOUT: call_timeout,
    IN_PROCESS: in_process,
    "XDG_CACHE_HOME": cache_home,
    HYPOTHESIS_STORAGE: lambda: _optional_folder(HYPOTHESIS_STORAGE),
}
"""Every variable and the reader that checks it."""


def check_environment() -> None:
    """Check every variable that is set; the first bad one is a :class:`SettingError`."""
    for read in READERS.values():
        read()
