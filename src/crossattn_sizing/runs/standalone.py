"""A report's ``repro.py``, run as a maintainer would: a fresh interpreter holding only torch and numpy.

The script must stand without the harness, so ``report`` runs it where
nothing of the harness (nor any engine) can be imported: ``python -I -S``
(no user site, no environment variables, no site-packages, not even the
current folder) with ``sys.path`` set to a temporary folder that holds links
to torch, numpy and the distributions torch requires, and nothing else. The
folder is the script's working directory and goes with the run; the child
runs in its own process group under a deadline and is ended with its
children on timeout or Ctrl-C (``check_runs.run_child``). What it printed is recorded in the report,
with every path of this machine replaced by a placeholder (a report names no
machine path).
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from crossattn_sizing.runs.check_runs import run_child

ROOTS = ("torch", "numpy")
"""The distributions a repro may import (with what they require to import)."""
DEADLINE_S = 300.0
"""How long one repro may run: importing torch on a loaded 2-core machine takes tens of seconds."""
BOOT = "import sys; sys.path[:] = [sys.argv[1], *sys.path]; sys.argv = sys.argv[2:]; "
BOOT += "import runpy; runpy.run_path(sys.argv[0], run_name='__main__')"
"""What the clean interpreter runs first: the site folder first on the path, then the script as __main__."""


@dataclass(frozen=True)
class StandaloneRun:
    """One run of a script in the clean interpreter: its exit status (None: past the deadline) and output."""

    command: str  # as a maintainer runs it: ``python3 -I repro.py``
    status: int | None
    output: str

    @property
    def raised(self) -> str:
        """The last line of a traceback (``IndexError: ...``), or "" when it raised nothing."""
        lines = [x for x in self.output.splitlines() if x.strip()]
        if (
            self.status in (0, None)
            or not lines
            or not re.match(r"^[A-Za-z_.]+(Error|Exception)\b", lines[-1])
        ):
            return ""
        return lines[-1]

    def to_json(self) -> dict[str, object]:
        """The run as JSON."""
        return {"command": self.command, "exit_status": self.status, "output": self.output}


def _distributions() -> list[metadata.Distribution]:
    """torch, numpy and every installed distribution they require (extras left out)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional runtime dependency absent here: the import does without it
        seen[key] = dist
        for text in dist.requires or ():
            name_only = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9_.-]*)", text)
            if name_only and "extra ==" not in text.replace("extra==", "extra =="):
                todo.append(name_only.group(1))  # one not installed here is skipped above
    return list(seen.values())


def site_folder(dest: Path) -> Path:
    """``dest`` holding links to the top-level modules of torch, numpy and their requirements only."""
    dest.mkdir(parents=True, exist_ok=True)
    for dist in _distributions():
        base = Path(str(dist.locate_file("")))
        tops = {Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith("..")}
        for top in sorted(tops):
            src, link = base / top, dest / top
            if (src.is_dir() or src.suffix in (".py", ".so", ".pyd")) and not link.exists():
                link.symlink_to(src, target_is_directory=src.is_dir())
    return dest


def scrub(text: str, places: dict[str, str]) -> str:
    """``text`` with each of ``places`` (a path here -> its placeholder) replaced, longest first."""
    for path, name in sorted(places.items(), key=lambda kv: -len(kv[0])):
        if path:
            text = text.replace(path, name)
    return text


def run_standalone(script: Path, *args: str, deadline_s: float = DEADLINE_S) -> StandaloneRun:
    """Run ``script`` (with ``args``) in a clean interpreter where only torch and numpy import."""
    shown = " ".join(["python3", "-I", script.name, *args])
    with tempfile.TemporaryDirectory(prefix="crossattn-repro-") as tmp:
        site = site_folder(Path(tmp) / "site")
        work = Path(tmp) / "work"
        work.mkdir()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work), "LC_ALL": "C.UTF-8"}
        cmd = [sys.executable, "-I", "-S", "-u", "-c", BOOT, str(site), str(script.resolve()), *args]
        out, status = run_child(cmd, "repro", deadline_s, cwd=work, env=env)
        if status is None:
            out = f"did not finish within {deadline_s:.0f} s"
        places = {
            str(script.resolve().parent): ".",
            str(site): "<site-packages>",
            str(work): "<cwd>",
            sys.prefix: "<python>",
            sys.base_prefix: "<python>",
        }
        places.update({os.path.dirname(os.path.realpath(p)): "<site-packages>" for p in site.iterdir()})
        return StandaloneRun(shown, status, scrub(out or "", places).rstrip() + "\n")
