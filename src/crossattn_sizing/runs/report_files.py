"""What ``report`` knows of the run beside the verdicts: the release, the environment, and no machine path.

A report is pasted into a public tracker, so it names no folder of this
machine: the working directory's paths become relative, the temporary
folder ``<tmp>``, the caches ``<cache>``, the home folder ``~``, and a tree
elsewhere ``<tree>`` (:func:`places`, applied by :func:`scrubbed` to every
string of the Markdown, the JSON and the scripts). The Environment section
holds what the engine's env tool would print that this run knows: Python,
the platform, torch and its neighbours' versions, the engine's release; a
GPU it never saw is not claimed.
"""

from __future__ import annotations

import importlib.metadata as metadata
import platform
import re
import tempfile
from pathlib import Path
from typing import Any

from crossattn_sizing.base import settings
from crossattn_sizing.engine.tracker_forms import TrackerForm
from crossattn_sizing.runs.standalone import scrub

MACHINE_PATH = re.compile(r"(?<![\w.<>-])(?:/work|/root|/home/|/tmp|/var/|/private/|/Users/|~/\.cache)")
"""An absolute path of a machine (or the cache's): what no report file may hold."""

_VERSION = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M)


def release_of(spec: str, root: Path, engine: str) -> str:
    """The release a spec names (``==X``), else the tree's own ``__version__``; "" when it has none."""
    if "==" in spec:
        return spec.split("==", 1)[1].strip()
    for name in ("version.py", "_version.py", "__init__.py"):
        path = root / engine / name
        if path.is_file():
            found = _VERSION.search(path.read_text(encoding="utf-8", errors="replace"))
            if found:
                return found.group(1)
    return ""


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment(form: TrackerForm | None, release: str) -> list[tuple[str, str]]:
    """The form's env-tool fields this run knows, under the tool's labels."""
    if form is None:
        return []
    known = {
        "python": platform.python_version(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "cuda": "False (found on a CPU: fill in the server's GPU, CUDA and driver)",
        "torch": _version("torch"),
        "numpy": _version("numpy"),
        "triton": _version("triton"),
        "transformers": _version("transformers"),
        "engine": release or "a source tree (no version file)",
    }
    return [(label, known[key]) for key, label in form.env_labels if key in known]


def places(tree: Path | None, *others: Path) -> dict[str, str]:
    """This machine's paths (the working directory, the tree, ``others`` such as a patch's folder, the
    caches, the temporary folder, home) -> what a report says instead."""
    cwd = Path.cwd().resolve()
    out = {str(settings.cache_home()): "<cache>", tempfile.gettempdir(): "<tmp>", str(Path.home()): "~"}
    for path in (*others, *([tree] if tree is not None else [])):
        path = path.resolve()
        if path.is_relative_to(cwd):
            out[str(path)] = str(path.relative_to(cwd)) or "."
        elif not path.is_relative_to(Path(tempfile.gettempdir()).resolve()):
            out[str(path)] = "<tree>" if path == tree else f"<{path.name}>"
    out[str(cwd) + "/"] = ""
    out[str(cwd)] = "."
    return out


def scrubbed(data: Any, where: dict[str, str]) -> Any:
    """``data`` (text, or JSON's lists and dicts) with every path of ``where`` replaced."""
    if isinstance(data, str):
        return scrub(data, where)
    if isinstance(data, list):
        return [scrubbed(x, where) for x in data]
    if isinstance(data, dict):
        return {k: scrubbed(v, where) for k, v in data.items()}
    return data
