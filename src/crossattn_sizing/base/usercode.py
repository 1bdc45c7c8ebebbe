"""Calling the user's code (a sizing policy, an implementation, the modules they live in) at one boundary.

A policy or an implementation is hostile input. At import or when called it
may call ``sys.exit`` with any code, raise ``KeyboardInterrupt``,
``SystemExit``, ``MemoryError`` or ``RecursionError``, or raise something
whose ``str()`` itself raises. None of that may end a run with the user's
exit code, a traceback, or an exit that reads as the user's Ctrl-C: every
call into user code goes through :func:`call` (or :func:`guard_method`),
which turns whatever it raised into one :class:`PolicyCallError` line naming
the code and what it did. Only a real Ctrl-C passes through: a
``KeyboardInterrupt`` counts as the user's only when a SIGINT was recorded
during the call (:func:`crossattn_sizing.base.interrupts.pressed_since`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from crossattn_sizing.base import errors, interrupts
from crossattn_sizing.base.errors import PolicyCallError

T = TypeVar("T")

MAX_SAID = 300
"""Characters of a user exception's message repeated in an error line (a 50 MB message is not echoed)."""


def shown(value: object, what: str = "value", *, as_repr: bool = False) -> str:
    """:func:`errors.shown` (``repr``) or :func:`errors.shown_plain` (``str``) bounded to
    :data:`MAX_SAID` characters, for an error line.

    User code's objects are hostile too: a ``__str__`` that raises anything at all
    is said to be unprintable instead of raising here.
    """
    try:
        return errors.shown(value, MAX_SAID) if as_repr else errors.shown_plain(value, MAX_SAID)
    except BaseException:  # hostile __str__/__repr__: nothing of it reaches the user
        return f"<{what} that cannot be printed>"


def describe(exc: BaseException) -> str:
    """What user code did, as the end of a sentence: ``called sys.exit(3)``, ``raised ValueError: ...``."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({shown(exc.code, 'exit code', as_repr=True)})"
    if isinstance(exc, KeyboardInterrupt):
        return "raised KeyboardInterrupt though no Ctrl-C was pressed"
    name = type(exc).__name__
    message = shown(exc, "message")
    return f"raised {name}: {message}" if message else f"raised {name}"


def call(fn: Callable[..., T], *args: Any, what: object, passthrough: tuple[type[BaseException], ...] = (),
         **kwargs: Any) -> T:  # fmt: skip
    """``fn(*args, **kwargs)``; anything it raises becomes a :class:`PolicyCallError` ``"{what} {did}"``.

    ``what`` names the code; its ``str()`` is only taken for an error line,
    so a caller on a hot path can pass an object that names it lazily.
    ``passthrough`` exceptions (the harness's own errors, Hypothesis's
    discarded example) and a Ctrl-C the user pressed during the call are
    re-raised as they are.
    """
    before = interrupts.presses()
    try:
        return fn(*args, **kwargs)
    except passthrough:
        raise
    except KeyboardInterrupt as exc:
        if interrupts.pressed_since(before):
            raise
        raise PolicyCallError(f"{what} {describe(exc)}") from None
    except BaseException as exc:  # the user's code: whatever it raises is theirs
        raise PolicyCallError(f"{what} {describe(exc)}") from None


def guard_method(method: Callable[..., T], what: str) -> Callable[..., T]:
    """``method``, but what is no ordinary exception (``sys.exit``, a ``KeyboardInterrupt`` no
    SIGINT caused, ``GeneratorExit``) becomes a :class:`PolicyCallError`.

    An implementation's kernel that raises an ``Exception`` has failed the
    property that called it (a verdict), so those pass through; leaving the
    process or faking a Ctrl-C is not an answer of any kind.
    """

    @functools.wraps(method)
    def guarded(*args: Any, **kwargs: Any) -> T:
        return call(method, *args, what=what, passthrough=(Exception,), **kwargs)

    return guarded
