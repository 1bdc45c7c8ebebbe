"""Output paths the user names (``--json``, ``--junit-xml``, ``--regressions``, ``--db``).

Each is checked before any work starts, so a run is never done in full and
then lost to a typo in a path. One rule for every command:

- a file output's missing folders are created before the run (as pytest does
  for ``--junit-xml``), the path must not be a folder nor lie under a file,
  and the file must be writable: probed by opening it, because permission bits
  say nothing when running as root or on read-only mounts;
- a folder output (regression files, example database) is created if missing,
  must not be a file, and must accept a new file;
- a file output must not be a device, a FIFO or a symbolic link loop (found
  with ``os.stat``, before anything opens it: opening a FIFO blocks, and side
  files written beside ``/dev/null`` would land in ``/dev``);
- the path returned is absolute, fixed when the command starts, so user code
  that changes the working directory during the run cannot move an output.

Two outputs of one run never name the same file (the second would overwrite
the first at the end of the run), and no output file lies in the regressions
folder, whose every JSON file later runs replay as a regression case: a report
written there would stop every later run (:func:`check_outputs`).

Writing goes through :func:`write_text`, which turns an ``OSError`` that still
happens (disk full, the folder removed mid-run) into the same one-line error;
every report's JSON file (verify, fuzz, prove, audit) through :func:`write_json`.
:class:`ReportFiles` checks a run's report files up front and is the one
writer of verify's, fuzz's and audit's ``--json``, ``--junit-xml`` and ``--markdown``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossattn_sizing.base import settings
from crossattn_sizing.base.errors import HarnessError, OptionError
from crossattn_sizing.base.pathkinds import input_folder_problem, output_file_problem


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _check_folders(option: str, target: Path) -> None:
    """The nearest existing folder above ``target`` must be a folder, not a file."""
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OptionError(option, target, f"{parent} is a file, not a folder")
            return


def regressions_folder() -> Path | None:
    """The folder whose JSON files the property suite replays (``CROSSATTN_REGRESSIONS_DIR``, else the
    suite's own), or None when no suite is installed here."""
    try:
        from crossattn_sizing.runs.suite import properties_dir

        default: Path | None = properties_dir() / "regressions"
    except HarnessError:  # no property suite here: only the variable can name one
        default = None
    return settings.regressions_dir(default)


def _resolved(option: str, path: str | os.PathLike[str]) -> Path:
    """``path`` with its links followed; a symbolic link loop is the option's error, not a RuntimeError."""
    problem = output_file_problem(path)
    if problem is not None:
        raise OptionError(option, path, problem)
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError) as exc:  # a loop further up the path (RuntimeError before 3.13)
        raise OptionError(option, path, f"cannot be resolved ({exc})") from None


def check_outputs(files: dict[str, str | os.PathLike[str] | None], regressions: Path | None = None) -> None:
    """The output files of one run (option to path; None when not given) name distinct files, none of
    them inside the regressions folder (``regressions``, else :func:`regressions_folder`)."""
    given = {option: _resolved(option, path) for option, path in files.items() if path not in (None, "")}
    if not given:
        return
    seen: dict[Path, str] = {}
    for option, real in given.items():
        if real in seen:
            rule = f"names the same file as {seen[real]}; give each output its own"
            raise OptionError(option, files[option], rule)
        seen[real] = option
    folder = regressions if regressions is not None else regressions_folder()
    if folder is None:
        return
    folder = _resolved("--regressions", folder)
    for option, real in given.items():
        if real.is_relative_to(folder):
            rule = f"lies in the regressions folder {folder}, whose JSON files every run replays"
            raise OptionError(option, files[option], rule)


def output_file(option: str, path: str | os.PathLike[str] | None) -> Path | None:
    """``path`` as a checked, writable file output, or None when the option was not given."""
    if path is None:
        return None
    target = Path(path)
    if str(path) == "":
        raise OptionError(option, "''", "needs a file path")
    problem = output_file_problem(target)  # before any open: a FIFO would block the probe below
    if problem is not None:
        raise OptionError(option, target, problem)
    if target.is_dir():
        raise OptionError(option, target, "is a folder; name a file to write")
    _check_folders(option, target)
    target = Path(os.path.abspath(target))
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
    if os.path.lexists(target):
        problem = input_folder_problem(target)
        if problem is not None and problem.startswith("is a file"):
            problem = "is a file; name a folder"
        elif problem is not None and problem.endswith("not a folder"):
            problem += "; name a folder"
        if problem is not None:
            raise OptionError(option, target, problem)
    _check_folders(option, target)
    target = Path(os.path.abspath(target))
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


def write_json(path: str | os.PathLike[str], data: Any, option: str = "--json") -> None:
    """Write a report's JSON file: the one serialisation of every command's ``--json`` (two-space indent,
    one final newline; an :class:`~crossattn_sizing.base.outcome.Outcome` is written as its word)."""
    write_text(option, Path(path), json.dumps(data, indent=2) + "\n")


REPORT_OPTIONS = {"json": "--json", "junit_xml": "--junit-xml", "markdown": "--markdown"}
"""Each report file of :class:`ReportFiles` and the option that names it."""


@dataclass(frozen=True)
class ReportFiles:
    """A run's report files, checked before the run: absolute paths, None where not asked for."""

    json: Path | None = None
    junit_xml: Path | None = None
    markdown: Path | None = None

    @classmethod
    def checked(cls, regressions: Path | None = None, **given: str | os.PathLike[str] | None) -> ReportFiles:
        """The files named (``json=``, ``junit_xml=``, ``markdown=``: the option's value, None when not
        given) checked as every output is (:func:`check_outputs`, then :func:`output_file` in turn)."""
        check_outputs({REPORT_OPTIONS[name]: path for name, path in given.items()}, regressions)
        return cls(**{name: output_file(REPORT_OPTIONS[name], path) for name, path in given.items()})

    def write(self, json: Callable[[], Any] | None = None, junit_xml: Callable[[], str] | None = None,
              markdown: Callable[[], str] | None = None) -> None:  # fmt: skip
        """Write each file asked for, in this order, from what its producer returns (a JSON-ready value,
        the XML text, the Markdown text); a producer is called only when its file is asked for."""
        if self.json is not None and json is not None:
            write_json(self.json, json())
        if self.junit_xml is not None and junit_xml is not None:
            write_text(REPORT_OPTIONS["junit_xml"], self.junit_xml, junit_xml())
        if self.markdown is not None and markdown is not None:
            write_text(REPORT_OPTIONS["markdown"], self.markdown, markdown())
