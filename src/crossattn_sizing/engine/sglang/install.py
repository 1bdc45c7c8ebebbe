"""Where an ``sglang==X`` release's files come from: its wheel, downloaded once and unpacked into the cache.

The wheel is fetched as every engine's is (:func:`crossattn_sizing.releases.sources.fetch_wheel`:
``pip download --no-deps --only-binary :all:``, so pip never resolves SGLang's dependencies,
which would pull a CUDA torch) into
``<engine cache>/wheels`` and unpacked with :mod:`zipfile` into
``<engine cache>/sglang-X``: the harness runs only the release's pure-Python
files (:mod:`crossattn_sizing.engine.sglang.run`), so nothing is installed.
SGLang 0.5.23 ships one wheel, for CPython 3.11; on another Python the
download for the running interpreter finds none, and the harness looks for
the Pythons the release does ship for, says which, and unpacks one of those
wheels anyway (its pure-Python files are all that runs).
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

from crossattn_sizing.base import settings
from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.engine.sglang.source import RELEASE_PREFIX, TREE_PREFIX, sglang_tree_root
from crossattn_sizing.releases.sources import fetch_wheel

_VERSION = re.compile(r"^\d+(\.\d+){1,3}([a-z]+\d*)?(\.post\d+)?$")
CPYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14")
"""Python versions asked for when the running one has no wheel (to name what the release ships for)."""


def sglang_version(spec: str) -> str:
    """The ``X`` of ``sglang==X``, refused in one line when it cannot be a release number."""
    version = spec.strip().removeprefix(RELEASE_PREFIX).strip()
    if not _VERSION.match(version):
        raise ReleaseUnavailable(f"{spec.strip()}: not a release version (expected e.g. sglang==0.5.23)")
    return version


def fetch_sglang_wheel(version: str, cache: Path, *, offline: bool) -> tuple[Path, str | None]:
    """The release's wheel and, when it is not for the running Python, a note naming the ones it ships for."""
    wheel = fetch_wheel(version, cache / "wheels", offline=offline, offline_by=f"{settings.OFFLINE}=1",
                        package="sglang", pythons=CPYTHONS)  # fmt: skip
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    tags = wheel.name.split("-")[2]  # name-version-python-abi-platform.whl
    running_tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if running_tag in tags.split(".") or tags.startswith("py3"):
        return wheel, None
    shipped = ", ".join(f"{t[2]}.{t[3:]}" for t in tags.split(".") if t.startswith("cp"))
    return wheel, (
        f"sglang=={version} ships wheels for Python {shipped} only, not {running}: its "
        "pure-Python files are all the harness runs, so the wheel is unpacked anyway"
    )


def resolve_sglang(spec: str, *, offline: bool | None = None, cache: Path | None = None) -> tuple[Path, str]:
    """The folder holding ``sglang/`` that ``spec`` names, and a note for the user ('' when none)."""
    spec = spec.strip()
    if spec.startswith(TREE_PREFIX):
        return sglang_tree_root(spec), ""
    if not spec.startswith(RELEASE_PREFIX):
        raise ReleaseUnavailable(f"{spec!r}: expected sglang==X.Y.Z or sglang@PATH")
    version = sglang_version(spec)
    offline = settings.offline() if offline is None else offline
    cache = cache or settings.engine_cache(None)
    target = cache / f"sglang-{version}"
    if (target / "sglang" / "srt").is_dir():
        return target, ""
    wheel, note = fetch_sglang_wheel(version, cache, offline=offline)
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.namelist() if m.startswith("sglang/") and m.endswith(".py")]
            archive.extractall(target, members)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ReleaseUnavailable(f"sglang=={version}: cannot unpack {wheel}: {exc}") from None
    return target, note or ""
