"""Unbounded recursion at import (``RecursionError``)."""


def down(n: int) -> int:
    return down(n + 1)


down(0)
