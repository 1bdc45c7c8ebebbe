"""What a path the user names is, found with ``os.stat`` before anything opens it.

Opening a FIFO blocks until a writer (or reader) comes, a character device such
as ``/dev/zero`` never ends, and a symbolic link loop makes ``Path.resolve`` raise
``RuntimeError`` deep inside a command. ``os.stat`` never blocks and follows
links, so every input file (a ``--config`` file, a regression file), input folder
(a ``vllm@PATH`` tree) and output file (``--json``, ``--markdown``
...) is looked at here first, and a path of the wrong kind is refused as bad
input with the reason, the same words for every command.

Each check returns the rule the path breaks (or None): the caller wraps it in
its own error type, which names the option, the variable or the file.
"""

from __future__ import annotations

import errno
import os
import stat


def _special(mode: int) -> str | None:
    """The kind of a file that is neither regular nor a folder, in words; None for those two."""
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return "not a regular file"


def _unstattable(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "is a symbolic link loop"
    if exc.errno == errno.ENOENT:
        return "does not exist"
    if exc.errno == errno.ENAMETOOLONG:
        return "is a path too long for the system"
    return f"cannot be read ({exc.strerror or type(exc).__name__})"


def _stat(path: str | os.PathLike[str]) -> os.stat_result | str:
    try:
        return os.stat(path)
    except OSError as exc:
        return _unstattable(exc)
    except ValueError:  # a NUL byte in the path
        return "is not a valid path (it holds a NUL character)"


def input_file_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be read as a file without blocking or running forever, or None when it can."""
    found = _stat(path)
    if isinstance(found, str):
        return found
    if stat.S_ISDIR(found.st_mode):
        return "is a folder, not a file"
    special = _special(found.st_mode)
    if special is not None:
        return f"is {special}, not a regular file: reading it could block or never end"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    return None


def input_folder_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be listed and read as a folder, or None when it can."""
    found = _stat(path)
    if isinstance(found, str):
        return found
    if not stat.S_ISDIR(found.st_mode):
        return f"is {_special(found.st_mode) or 'a file'}, not a folder"
    if not os.access(path, os.R_OK | os.X_OK):
        return "cannot be read (permission denied)"
    return None


def output_file_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be written as a regular file (a device, a FIFO, a link loop), or None.

    A path that does not exist yet is fine (the caller creates it); so is an
    existing regular file. A folder is the caller's to word (it says "name a file").
    """
    try:
        found = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        if exc.errno == errno.ELOOP:
            return "is a symbolic link loop"
        if exc.errno in (errno.ENOTDIR, errno.EACCES, errno.ENAMETOOLONG):
            return None  # the caller's checks word these (a file above it, an unwritable folder)
        return f"cannot be written ({exc.strerror or type(exc).__name__})"
    except ValueError:
        return "is not a valid path (it holds a NUL character)"
    special = _special(found.st_mode)
    if special is not None:
        return f"is {special}; name a regular file (nothing is written to a device or pipe)"
    return None
