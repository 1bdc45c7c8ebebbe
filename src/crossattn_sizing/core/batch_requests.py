"""One request of a batch in a row shared by encoder and decoder tokens (SGLang's), as drawn (no torch).

A request is ``(E, prompt, d)`` or ``(E, prompt, d, cached)``: encoder tokens,
prompt tokens, decoder tokens at this decode step, and how many tokens of its
input (``E + prompt``, encoder first) a cached prefix already holds. SGLang's
``prepare_encoder_info_extend`` treats the encoder part as a whole: a prefix
is 0 or covers the encoder (it asserts so), so a request's extend computes
either its encoder and its whole prompt, or only the prompt tokens past the
prefix.
"""

from __future__ import annotations

from collections.abc import Sequence

Request = Sequence[int]
"""``(E, prompt, d)`` or ``(E, prompt, d, cached)``."""


def cached_prefix(request: Request) -> int:
    """The request's cached prefix (its 4th field; 0 when it has none)."""
    return int(request[3]) if len(request) > 3 else 0


def extended(request: Request) -> tuple[int, int]:
    """``(encoder tokens, prompt tokens)`` the request's extend computes: everything without a prefix; with
    a prefix of ``c >= E`` nothing of the encoder and the ``E + prompt - c`` prompt tokens past it."""
    e, p, c = int(request[0]), int(request[1]), cached_prefix(request)
    return (e, p) if c == 0 else (0, e + p - c)


def prefix_ok(request: Request) -> bool:
    """Whether a server can hand the request this prefix: 0, or covering the encoder with at least one
    prompt token left to extend (a prefix ending inside the encoder is one SGLang asserts never happens)."""
    e, p, c = int(request[0]), int(request[1]), cached_prefix(request)
    return c == 0 or e <= c < e + p
