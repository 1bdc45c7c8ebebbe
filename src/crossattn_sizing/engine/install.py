"""Where a vLLM release's code comes from: the installed package, or its wheel unpacked into a cache.

On a GPU box vLLM is installed and used as it is. On a CPU machine a release
is installed once, side by side with others, into
``<cache>/vllm-X`` with ``pip install --no-deps --target`` from the audit's
wheel cache (downloaded once, see :mod:`crossattn_sizing.releases.sources`).
vLLM's own dependencies are never resolved by pip (that would replace the CPU
torch with a CUDA build): the worker is started, and each module the import
chain misses is installed alone (``--no-deps``) into ``<cache>/deps``, with a
constraints file pinning the running torch and triton, until the release
imports. What each release needed is kept in ``<cache>/vllm-X/crossattn-engine.json``.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from crossattn_sizing.base import settings
from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.engine.specs import tree_root
from crossattn_sizing.releases.sources import check_version, fetch_wheel

MANIFEST = "crossattn-engine.json"
MAX_DEPENDENCY_ROUNDS = 40

# Import names whose distribution is called something else.
DISTRIBUTIONS = {
    "zmq": "pyzmq",
    "yaml": "pyyaml",
    "attr": "attrs",
    "google": "protobuf",
    "PIL": "pillow",
    "cv2": "opencv-python-headless",
    "jwt": "pyjwt",
    "dateutil": "python-dateutil",
    "sklearn": "scikit-learn",
    "cpuinfo": "py-cpuinfo",
    "tvm_ffi": "apache-tvm-ffi",
    "opentelemetry": "opentelemetry-api",
}
# Never installed by the adapter: the engine itself, and what must stay the CPU build.
REFUSED = ("vllm", "torch", "triton", "nvidia", "cuda", "flash_attn", "xformers")


@dataclass
class Release:
    """One release's code: the paths the worker puts first on ``sys.path``, and what it needed."""

    version: str | None  # None: the installed vllm, whatever its version
    paths: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    installed: bool = False
    tree: str | None = None  # vllm@PATH: a source tree, run in place (nothing written into it)
    offline: bool = False  # decided once, when the release was resolved: no dependency is installed then

    @property
    def label(self) -> str:
        """How error lines and reports name the release (``vllm==X``, ``vllm@tree``)."""
        if self.tree is not None:
            return f"vllm@{self.tree}"
        return "vllm (installed)" if self.version is None else f"vllm=={self.version}"


def default_engine_cache(wheel_cache: Path | None = None) -> Path:
    """``$CROSSATTN_ENGINE_CACHE``, else ``engine/`` in a wheel cache the user named, else
    ``~/.cache/crossattn-sizing/engine`` beside the default wheel cache (see settings.engine_cache)."""
    return settings.engine_cache(wheel_cache)


def installed_version() -> str | None:
    """The version of the vllm distribution installed in this environment, if any."""
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def offline_default() -> bool:
    return settings.offline()


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    """One installer at a time per cache (parallel test workers share it).

    A cache that cannot be created or written (``HOME=/proc``, a read-only mount)
    is the user's to fix: an :class:`ReleaseUnavailable` naming it, exit 2, not a traceback.
    """
    try:
        cache.mkdir(parents=True, exist_ok=True)
        lock = open(cache / ".lock", "w")  # noqa: SIM115  # closed below, after the block
    except OSError as exc:
        raise ReleaseUnavailable(
            f"the engine cache {cache} cannot be written ({exc.strerror or exc}); "
            f"set {settings.ENGINE_CACHE} or HOME to a writable folder"
        ) from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def constraints_file(cache: Path) -> Path:
    """A pip constraints file pinning the torch and triton this interpreter runs."""
    lines = []
    for dist in ("torch", "triton"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            lines.append(f"{dist}=={importlib.metadata.version(dist)}")
    path = cache / "constraints.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _pip_target(target: Path, what: str, cache: Path) -> None:
    cmd = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
        "--target", str(target), "--upgrade", "-c", str(constraints_file(cache)), what,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.startswith("ERROR")]
        why = lines[0] if lines else f"pip exited {proc.returncode}"
        raise ReleaseUnavailable(f"could not install {what} into {target}: {why}")


def resolve_release(
    spec: str, *, offline: bool | None = None, cache: Path | None = None, wheel_cache: Path | None = None
) -> Release:
    """The release a ``vllm`` or ``vllm==X`` spec names, installed into the cache if needed.

    ``vllm`` is the installed package (an error if there is none). ``vllm==X``
    is the installed package when its version is ``X``, else the cached copy,
    unpacked from the wheel cache on first use. Modules the release's import
    chain misses are added by :func:`complete_dependencies` when the worker
    first starts.
    """
    spec = spec.strip()
    offline_by = "--offline" if offline is not None else f"{settings.OFFLINE}=1"
    offline = offline_default() if offline is None else offline
    if spec.startswith("vllm@"):  # a source tree: its folder first on sys.path, modules it misses in deps/
        root = tree_root(spec)
        cache = cache or default_engine_cache()
        return Release(None, [str(root), str(cache / "deps")], tree=str(root), offline=offline)
    if spec == "vllm":
        if installed_version() is None:
            raise ReleaseUnavailable("vllm: no vllm is installed here; name a release, e.g. vllm==0.25.0")
        return Release(None, installed=True)
    if not spec.startswith("vllm=="):
        raise ReleaseUnavailable(f"{spec!r}: expected vllm, vllm==X.Y.Z or vllm@PATH")
    version = check_version(spec.removeprefix("vllm=="), option=None)
    if installed_version() == version:
        return Release(version, installed=True)
    cache = cache or default_engine_cache(wheel_cache)
    target = cache / f"vllm-{version}"
    with _locked(cache):
        if not (target / "vllm" / "__init__.py").is_file():
            wheel = fetch_wheel(version, wheel_cache, offline=offline, offline_by=offline_by)
            _pip_target(target, str(wheel), cache)
        manifest = read_manifest(target)
    return Release(version, [str(target), str(cache / "deps")], manifest.get("packages", []), offline=offline)


def read_manifest(target: Path) -> dict:
    path = target / MANIFEST
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def add_dependency(release: Release, module: str) -> str:
    """Install the distribution of ``module`` (alone) for ``release``; return its name.

    Refused when the release was resolved offline (``--offline`` or
    ``CROSSATTN_OFFLINE=1`` then), so an ``audit --offline`` never installs,
    without touching the environment.
    """
    if release.installed:
        raise ReleaseUnavailable(
            f"{release.label} is installed but does not import: module {module!r} is missing from "
            "this environment"
        )
    if module.startswith(REFUSED) or module in REFUSED:
        raise ReleaseUnavailable(
            f"{release.label}: the import chain needs {module!r}, which the adapter never installs"
        )
    if release.offline:
        raise ReleaseUnavailable(
            f"{release.label}: module {module!r} is missing and --offline forbids installing it"
        )
    target = Path(release.paths[0])
    cache = Path(release.paths[-1]).parent  # paths end with <cache>/deps
    dist = DISTRIBUTIONS.get(module, module)
    with _locked(cache):
        _pip_target(cache / "deps", dist, cache)
        if release.tree is not None:  # a user's tree: nothing is written into it
            release.packages = sorted(set(release.packages) | {dist})
            return dist
        manifest = read_manifest(target)
        packages = sorted(set(manifest.get("packages", [])) | {dist})
        manifest.update({"version": release.version, "packages": packages})
        (target / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    release.packages = packages
    return dist


def record_shims(release: Release, ready: dict) -> None:
    """Keep what the release needed at run time (shims, modules it imported from deps/) in its manifest."""
    if release.installed or not release.paths or release.tree is not None:
        return
    target = Path(release.paths[0])
    manifest = read_manifest(target)
    manifest.update({"version": release.version, "shims": ready.get("shims", []),
                     "imported_from_deps": ready.get("added_modules", []),
                     "import_s": ready.get("import_s", 0.0)})  # fmt: skip
    manifest.setdefault("packages", release.packages)
    with contextlib.suppress(OSError):
        (target / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


__all__ = ["MAX_DEPENDENCY_ROUNDS", "Release", "resolve_release"]
