"""Sizing policies that cannot be called as policies: bad input, never a property failure.

Unlike ``broken_policies`` (plausible slips the properties must catch), each of
these breaks the policy contract itself, ``(RunnerConfig) -> one int per
group``; every command and the pytest plugin must refuse them with one line
and exit 2 (pytest: its usage-error status) before any work starts.
"""

from __future__ import annotations

from crossattn_sizing.config import RunnerConfig
from crossattn_sizing.policies import BUILTIN_POLICIES


def raises(config: RunnerConfig) -> tuple[int, ...]:
    """Raises on every config."""
    raise ValueError("this policy does not know the config")


def no_argument() -> tuple[int, ...]:
    """Takes no config at all."""
    return (128,)


def one_width_too_few(config: RunnerConfig) -> tuple[int, ...]:
    """One width short: a group left without a row width."""
    return BUILTIN_POLICIES["mrv2"](config)[:-1]


def floats(config: RunnerConfig) -> tuple[float, ...]:
    """Widths as floats: a column count is an integer."""
    return tuple(float(w) for w in BUILTIN_POLICIES["mrv2"](config))


def returns_none(config: RunnerConfig) -> None:
    """Forgets to return."""


def negative(config: RunnerConfig) -> tuple[int, ...]:
    """A negative width."""
    return tuple(-1 for _ in config.groups)


def raises_for_dcp(config: RunnerConfig) -> tuple[int, ...]:
    """Fine on the probe config, raises once DCP is in play: found inside the suite, still bad input."""
    if config.dcp_size > 1:
        raise NotImplementedError("no DCP support")
    return BUILTIN_POLICIES["mrv2"](config)


NOT_CALLABLE = 42
"""Not a function at all."""
