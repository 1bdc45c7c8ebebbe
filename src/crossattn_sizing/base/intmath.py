"""Integer helpers every layer shares: ceiling division and rounding up.

They live apart from :mod:`crossattn_sizing.core.policies` (the code under test,
and the module mutation testing changes) so that the admission model, the
runner and the property strategies do not borrow their arithmetic from the
thing they check.
"""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """Ceiling division on non-negative ints."""
    return -(-a // b)


def align_up(n: int, a: int) -> int:
    """``n`` rounded up to a multiple of ``a``."""
    return cdiv(n, a) * a
