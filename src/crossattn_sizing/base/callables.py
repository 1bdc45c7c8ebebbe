"""Loading a callable named by the user: a built-in name or ``module:attr``.

Sizing policies and implementations are both named this way on the command
line; one loader serves both, so both give the same one-line
:class:`~crossattn_sizing.base.errors.PolicyLoadError` for every way a name can be
wrong. It is kept out of the code under test (``policies.py``, ``impl.py``).

A ``module:attr`` is looked for in one place everywhere, in the judge and in
every worker (:func:`user_path_first`): the current folder, then
``PYTHONPATH``, then the rest of ``sys.path``. Why: the console script's
``sys.path`` starts with its own folder, ``python -m`` with the current one; a
module beside the user must load the same way whichever started the run, and
whichever process (the judge, a policy's worker, an implementation's) reads it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from crossattn_sizing.base import usercode
from crossattn_sizing.base.errors import PolicyCallError, PolicyLoadError


def user_path() -> list[str]:
    """Where a ``module:attr`` is looked for first, in order: the current folder, then ``PYTHONPATH``."""
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return list(dict.fromkeys(os.path.abspath(p) for p in [os.getcwd(), *extra]))


def user_path_first() -> None:
    """Put :func:`user_path` at the front of this process's ``sys.path`` (each folder once), before a
    ``module:attr`` is found or imported: in the judge as in a worker, whatever started the process."""
    first = user_path()
    rest = [p for p in sys.path if (os.path.abspath(p) if p else os.getcwd()) not in first]
    sys.path[:] = [*first, *rest]


def check_form(spec: str, builtins: Mapping[str, Any], what: str) -> None:
    """Refuse a spec that is neither one of ``builtins`` nor of the form ``module:attr``, without
    importing anything (a ``module:attr`` run in a worker is imported there, not here)."""
    if spec in builtins:
        return
    if ":" not in spec:
        known = ", ".join(sorted(builtins))
        raise PolicyLoadError(f"unknown {what} {spec!r}: use one of {known} or module:attr")
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise PolicyLoadError(f"{what} {spec!r}: expected the form module:attr")


def check_findable(spec: str, builtins: Mapping[str, Any], what: str) -> None:
    """:func:`check_form`, and the module's top-level package must exist, found without running any of it.

    Why: a ``module:attr`` that runs in a worker process is imported there,
    never in the judge (its import is the user's code too), yet a name that
    names nothing is still refused when the run starts. Finding a top-level
    package executes nothing; what lies deeper is the worker's to report.
    """
    check_form(spec, builtins, what)
    if spec in builtins:
        return
    module_name = spec.partition(":")[0]
    top = module_name.split(".")[0]
    user_path_first()
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise PolicyLoadError(
            f"{what} {spec!r}: module {module_name!r} does not import (no module named {top!r})"
        )


def load_callable(spec: str, builtins: Mapping[str, Any], what: str) -> Callable[..., Any]:
    """Resolve ``spec`` as one of ``builtins`` or a ``module:attr`` path.

    ``what`` names the kind of thing in the error ("sizing policy",
    "implementation"). Raises :class:`PolicyLoadError` when the name is
    unknown, the module does not import (whatever its import raised, ``sys.exit``
    and ``KeyboardInterrupt`` included: :mod:`crossattn_sizing.base.usercode`), the
    attribute is missing or is not callable.
    """
    if spec in builtins:
        return builtins[spec]  # type: ignore[no-any-return]
    check_form(spec, builtins, what)
    module_name, _, attr = spec.partition(":")
    user_path_first()
    try:
        module = usercode.call(importlib.import_module, module_name, what="import")
    except PolicyCallError as exc:  # any import failure is the user's path, reported as such
        did = str(exc).removeprefix("import ")
        did = did.removeprefix("raised ") if did.startswith("raised ") else f"it {did}"
        raise PolicyLoadError(f"{what} {spec!r}: module {module_name!r} does not import ({did})") from None
    obj: Any = module
    for part in attr.split("."):
        missing = object()
        obj = usercode.call(getattr, obj, part, missing, what=f"{what} {spec!r}: reading {part!r}")
        if obj is missing:
            raise PolicyLoadError(f"{what} {spec!r}: {module_name!r} has no attribute {attr!r}")
    if not callable(obj):
        raise PolicyLoadError(f"{what} {spec!r}: {attr!r} is not callable")
    return obj  # type: ignore[no-any-return]
