"""``report --fix PATCH``: the user's diff applied to a copy of the tree, and the properties run on it.

The release (or tree) is copied into a temporary folder and the patch applied
there with ``git apply`` (``-p1``, the ``a/`` ``b/`` paths ``git diff``
writes, else ``-p0``): the cached release and the user's tree are never
written. A patch that does not apply is one line naming the file and git's
reason. The copy goes when the check is done, on every way out.

A patch that applies but leaves the copy unloadable is the fix's own
verdict ("not run"), not bad input: :func:`unloadable` says why in the
user's terms, the patched file and line relative to the tree, never the
temporary copy's path (the user never sees that folder).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from crossattn_sizing.base.errors import OptionError
from crossattn_sizing.base.processes import temp_folder_while

COPY_NAME = "the patched copy"
"""How a message names the temporary copy."""


def _apply(tree: Path, patch: Path, strip: str, check: bool) -> subprocess.CompletedProcess[str]:
    cmd = ["git", "apply", strip, *(["--check"] if check else []), str(patch)]
    return subprocess.run(cmd, cwd=tree, capture_output=True, text=True, check=False)


@contextlib.contextmanager
def patched_copy(root: Path, patch: Path, spec: str) -> Iterator[Path]:
    """A temporary copy of ``root`` with ``patch`` applied; :class:`OptionError` when it does not apply."""
    if not patch.is_file():
        raise OptionError("--fix", str(patch), "is not a file (a unified diff against the tree)")
    with temp_folder_while("crossattn-fix-") as tmp:
        copy = tmp / "tree"
        shutil.copytree(root, copy, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", ".git"))
        why = ""
        for strip in ("-p1", "-p0"):
            probe = _apply(copy, patch.resolve(), strip, check=True)
            if probe.returncode == 0:
                done = _apply(copy, patch.resolve(), strip, check=False)
                if done.returncode == 0:
                    break
                probe = done
            why = why or (probe.stderr.strip().splitlines() or ["git apply failed"])[0]
        else:
            raise OptionError("--fix", str(patch), f"does not apply to {spec}: {why}")
        yield copy


def _changed_files(copy: Path, patch: Path) -> list[str]:
    """The files ``patch`` changed in ``copy``, relative to the tree (``git apply --numstat``)."""
    for strip in ("-p1", "-p0"):
        cmd = ["git", "apply", strip, "--numstat", str(patch.resolve())]
        proc = subprocess.run(cmd, cwd=copy, capture_output=True, text=True, check=False)
        names = [line.split("\t", 2)[2] for line in proc.stdout.splitlines() if line.count("\t") >= 2]
        if proc.returncode == 0 and all((copy / n).is_file() for n in names):
            return names
    return []


def in_user_terms(text: str, copy: Path, spec: str) -> str:
    """``text`` with the temporary copy named as the user knows it: a path in it relative to the tree,
    the copy itself as "the patched copy of SPEC"."""
    engine = spec.split("@", 1)[0].split("==", 1)[0]
    text = text.replace(f"{engine}@{copy}", f"{COPY_NAME} of {spec}")
    return text.replace(f"{copy}/", "").replace(str(copy), f"{COPY_NAME} of {spec}")


def unloadable(copy: Path, patch: Path, spec: str, error: BaseException) -> str:
    """Why the patched copy does not load, as one line: a patched Python file that does not parse
    (``path/in/tree.py:LINE: message``, compiled here, never run), else ``error`` in the user's terms."""
    for name in _changed_files(copy, patch):
        if not name.endswith(".py"):
            continue
        try:
            compile((copy / name).read_bytes(), name, "exec", dont_inherit=True)
        except SyntaxError as exc:
            return f"{name}:{exc.lineno}: {type(exc).__name__}: {exc.msg}"
        except ValueError as exc:  # a NUL byte in the source
            return f"{name}: {exc}"
        except (RecursionError, MemoryError):  # too deep for this parser: the error says what the engine saw
            continue
    lines = in_user_terms(str(error), copy, spec).strip().splitlines()
    return lines[0] if lines else type(error).__name__
