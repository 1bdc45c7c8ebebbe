"""Upper bounds on what a user may ask for, checked before anything is allocated or converted.

Each bound is far past any real engine's value and far below what would take
the machine's memory: a block size of 10**12 or ``max_num_reqs`` of 10**9 is a
typo, and without a bound it becomes tensors or lists of that size (a request
per row, a token per slot) long before any check could answer. Integers with
thousands of digits are refused by their length: Python refuses to convert
such strings itself (``ValueError`` past ``sys.get_int_max_str_digits()``),
and no count the harness takes needs more than a few dozen digits.
"""

from __future__ import annotations

import argparse

from crossattn_sizing.base.errors import OptionError, shown

MAX_INT_DIGITS = 30
"""Digits an integer option or JSON number may have (2**64 has 20)."""
MAX_BLOCK_SIZE = 2**16
"""Tokens per KV-cache block (engines use up to a few thousand, mamba groups included)."""
MAX_NUM_REQS = 2**16
"""Rows of a block table (vLLM's default is 1024): every row is a request the checks build."""
MAX_SEED = 2**64 - 1
"""The largest seed torch and NumPy take; Hypothesis's seeds are passed on to them."""


def too_long(text: str) -> bool:
    """Whether an integer's text has more digits than :data:`MAX_INT_DIGITS` (sign and spaces aside)."""
    return len(text.strip().lstrip("+-")) > MAX_INT_DIGITS


def parse_int(option: str, text: str, minimum: int, maximum: int | None = None) -> int:
    """An integer option as text, in ``[minimum, maximum]``; anything else is one :class:`OptionError`."""
    if too_long(text):
        raise OptionError(option, shown(text), f"must be an integer of at most {MAX_INT_DIGITS} digits")
    try:
        value = int(text)
    except ValueError:
        raise OptionError(option, shown(text), "must be an integer") from None
    check_range(option, value, minimum, maximum)
    return value


def check_range(option: str, value: int, minimum: int, maximum: int | None = None) -> None:
    """``value`` lies in ``[minimum, maximum]``, or an :class:`OptionError` stating the bound."""
    if value < minimum:
        raise OptionError(option, value, f"must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise OptionError(option, value, f"must be <= {maximum}")


def int_arg(text: str) -> int:
    """argparse ``type=`` for integer options: a number with thousands of digits is one short line."""
    if too_long(text):
        raise argparse.ArgumentTypeError(f"invalid int value: {shown(text)}: at most {MAX_INT_DIGITS} digits")
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {shown(text)}") from None




def float_arg(text: str) -> float:
    """argparse ``type=`` for number options: the value is shown cut, never echoed whole."""
    if len(text) > 4 * MAX_INT_DIGITS:
        raise argparse.ArgumentTypeError(f"invalid float value: {shown(text)}: too long for a number")
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {shown(text)}") from None

