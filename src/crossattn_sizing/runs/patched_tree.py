"""``report --fix PATCH``: the user's diff applied to a copy of the tree, and the properties run on it.

The release (or tree) is copied into a temporary folder and the patch applied
there with ``git apply`` (``-p1``, the ``a/`` ``b/`` paths ``git diff``
writes, else ``-p0``): the cached release and the user's tree are never
written. A patch that does not apply is one line naming the file and git's
reason. The copy goes when the check is done, on every way out.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from crossattn_sizing.base.errors import OptionError


def _apply(tree: Path, patch: Path, strip: str, check: bool) -> subprocess.CompletedProcess[str]:
    cmd = ["git", "apply", strip, *(["--check"] if check else []), str(patch)]
    return subprocess.run(cmd, cwd=tree, capture_output=True, text=True, check=False)


@contextlib.contextmanager
def patched_copy(root: Path, patch: Path, spec: str) -> Iterator[Path]:
    """A temporary copy of ``root`` with ``patch`` applied; :class:`OptionError` when it does not apply."""
    if not patch.is_file():
        raise OptionError("--fix", str(patch), "is not a file (a unified diff against the tree)")
    tmp = Path(tempfile.mkdtemp(prefix="crossattn-fix-"))
    try:
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
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
