"""Argument checks shared by the oracle's modules (and by nothing outside ``reference/``).

Each module refuses a size or index below its floor with the same one-line message,
``NAME must be >= N, got V``; written once here so the wording and the comparison
cannot differ from one module to the next.
"""

from __future__ import annotations


def at_least(name: str, value: int, minimum: int, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` naming ``name`` when ``value < minimum``."""
    if value < minimum:
        raise error(f"{name} must be >= {minimum}, got {value}")
