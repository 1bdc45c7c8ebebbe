"""Output paths the user names (``--json``, ``--junit-xml``, ``--regressions``, ``--db``).

Each is checked before any work starts, so a run is never done in full and
then lost to a typo in a path. One rule for every command:

- a file output's missing folders are created before the run (as pytest does
  for ``--junit-xml``), the path must not be a folder nor lie under a file,
  and the file must be writable: probed by opening it, because permission bits
  say nothing when running as root or on read-only mounts;
- a folder output (regression files, example database) is created if missing,
  must not be a file, and must accept a new file.

Writing goes through :func:`write_text`, which turns an ``OSError`` that still
happens (disk full, the folder removed mid-run) into the same one-line error.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from crossattn_sizing.errors import OptionError


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _check_folders(option: str, target: Path) -> None:
    """The nearest existing folder above ``target`` must be a folder, not a file."""
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OptionError(option, target, f"{parent} is a file, not a folder")
            return


def output_file(option: str, path: str | os.PathLike[str] | None) -> Path | None:
    """``path`` as a checked, writable file output, or None when the option was not given."""
    if path is None:
        return None
    target = Path(path)
    if str(path) == "":
        raise OptionError(option, "''", "needs a file path")
    if target.is_dir():
        raise OptionError(option, target, "is a folder; name a file to write")
    _check_folders(option, target)
    existed = target.exists()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise OptionError(option, target, f"cannot be written ({_reason(exc)})") from None
    if not existed:
        target.unlink()  # the probe leaves nothing behind; the run writes the file at its end
    return target


def output_dir(option: str, path: str | os.PathLike[str] | None) -> Path | None:
    """``path`` as a checked folder output (created if missing), or None when not given."""
    if path is None:
        return None
    target = Path(path)
    if str(path) == "":
        raise OptionError(option, "''", "needs a folder path")
    if target.exists() and not target.is_dir():
        raise OptionError(option, target, "is a file; name a folder")
    _check_folders(option, target)
    try:
        target.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=target, prefix=".write-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OptionError(option, target, f"cannot be written ({_reason(exc)})") from None
    return target


def write_text(option: str, path: Path, text: str) -> None:
    """Write an output file; an OS failure is the same one-line error as the check before the run."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise OptionError(option, path, f"cannot be written ({_reason(exc)})") from None
