"""Sizing policies that cannot be called as policies: bad input, never a property failure.

Unlike ``broken_policies`` (plausible slips the properties must catch), each of
these breaks the policy contract itself, ``(RunnerConfig) -> one int per
group``; every command and the pytest plugin must refuse them with one line
and exit 2 (pytest: its usage-error status) before any work starts.
"""

from __future__ import annotations

import os
import sys
import time

from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.policies import BUILTIN_POLICIES, PROBE_CONFIG


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


# Hostile ones: user code may leave the process, fake a Ctrl-C, exhaust memory or the stack,
# change the config it is handed, or answer numbers past any arithmetic. Each is bad input
# (exit 2, the plugin 4), named; never exit 0, "holds", a traceback or an exit read as Ctrl-C.
mrv2 = BUILTIN_POLICIES["mrv2"]


def exits_zero(config: RunnerConfig) -> tuple[int, ...]:
    """``sys.exit(0)``: would read as success if it reached the interpreter."""
    sys.exit(0)


def exits_three(config: RunnerConfig) -> tuple[int, ...]:
    """``sys.exit(3)``: would read as the harness's own "did not run" status."""
    sys.exit(3)


def exits_with_text(config: RunnerConfig) -> tuple[int, ...]:
    """``sys.exit("message")``: Python would print it and exit 1."""
    sys.exit("policy gave up")


def raises_system_exit_130(config: RunnerConfig) -> tuple[int, ...]:
    """``SystemExit(130)``: the status a Ctrl-C gives."""
    raise SystemExit(130)


def raises_keyboard_interrupt(config: RunnerConfig) -> tuple[int, ...]:
    """A ``KeyboardInterrupt`` no SIGINT caused: the policy's, not the user's Ctrl-C."""
    raise KeyboardInterrupt


def raises_memory_error(config: RunnerConfig) -> tuple[int, ...]:
    raise MemoryError("cannot allocate the width table")


def recurses(config: RunnerConfig) -> tuple[int, ...]:
    """Unbounded recursion: ``RecursionError``."""
    return recurses(config)


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise SystemExit(0)


def raises_unprintable(config: RunnerConfig) -> tuple[int, ...]:
    """An exception whose ``str()`` itself calls ``sys.exit``."""
    raise _Unprintable


def mutates_config(config: RunnerConfig) -> tuple[int, ...]:
    """Changes a field of the frozen config through ``object.__setattr__``, then answers for it."""
    object.__setattr__(config, "max_num_encoder_input_tokens", 1)
    return mrv2(config)


def mutates_group(config: RunnerConfig) -> tuple[int, ...]:
    """Changes the cross group's block size under the harness's feet."""
    object.__setattr__(config.groups[-1], "block_size", 1)
    return mrv2(config)


def huge(config: RunnerConfig) -> tuple[int, ...]:
    """Widths of 2**80 entries: past int64 and any allocation."""
    return tuple(2**80 for _ in config.groups)


def digits(config: RunnerConfig) -> tuple[int, ...]:
    """A width too long even to print (Python refuses to convert it to a string)."""
    return tuple(10**5000 for _ in config.groups)


def _later(config: RunnerConfig) -> bool:
    """Whether this is a config other than the start-up probe's: misbehaviour found only later."""
    return config != PROBE_CONFIG


def exits_zero_later(config: RunnerConfig) -> tuple[int, ...]:
    """Right on the probe config, ``sys.exit(0)`` on the next."""
    if _later(config):
        sys.exit(0)
    return mrv2(config)


def interrupts_later(config: RunnerConfig) -> tuple[int, ...]:
    """Right on the probe config, a fake Ctrl-C on the next."""
    if _later(config):
        raise KeyboardInterrupt
    return mrv2(config)


def mutates_later(config: RunnerConfig) -> tuple[int, ...]:
    """Right on the probe config, changes the next config it is handed."""
    if _later(config):
        object.__setattr__(config, "max_model_len", 1)
    return mrv2(config)


def huge_later(config: RunnerConfig) -> tuple[int, ...]:
    """Right on the probe config, 2**80 on the next."""
    if _later(config):
        return tuple(2**80 for _ in config.groups)
    return mrv2(config)


def memory_error_later(config: RunnerConfig) -> tuple[int, ...]:
    if _later(config):
        raise MemoryError
    return mrv2(config)


def recurses_later(config: RunnerConfig) -> tuple[int, ...]:
    if _later(config):
        return recurses(config)
    return mrv2(config)


def too_small_later(config: RunnerConfig) -> tuple[int, ...]:
    """Right on the probe config, one column per row on the next: a real verdict (fails), not bad input."""
    widths = mrv2(config)
    if _later(config):
        return tuple(1 for _ in widths)
    return widths


HANGING = "unusable_policies: hanging"
"""What :func:`hangs` prints to stderr just before it hangs (a test waits for it, then presses Ctrl-C)."""


def hangs(config: RunnerConfig) -> tuple[int, ...]:
    """Never answers: a test presses Ctrl-C while it hangs (sleeping, then spinning)."""
    os.write(2, f"{HANGING}\n".encode())  # fd 2 itself: pytest's capture swaps sys.stderr only
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        time.sleep(0.01)
    return mrv2(config)


def hangs_after_probe(config: RunnerConfig) -> tuple[int, ...]:
    """Right on the probe config, then hangs: the run is under way when the user gives up."""
    if _later(config):
        return hangs(config)
    return mrv2(config)
