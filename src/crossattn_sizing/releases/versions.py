"""Release numbers in order: the one parser every engine's release table, range and audit row reads.

Why one: a release number has a pre-release (``0.34.0rc1``), a post release
(``0.5.13.post1``), a development build (``0.24.1.dev5``) and a local part
(``+cu121``), and where one reader ignored a suffix another counted it, so two
tables could order the same releases differently. :func:`release_key` orders
them as pip does (PEP 440): ``0.34.0.dev1 < 0.34.0rc1 < 0.34.0 < 0.34.0.post1
< 0.34.1``; ``0.24`` and ``0.24.0`` are the same release; the local part does
not order.
"""

from __future__ import annotations

import re

_NUMBER = re.compile(
    r"^v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[.-]?(?P<pre>a|alpha|b|beta|c|rc|pre|preview)(?P<pre_n>\d*))?"
    r"(?:[.-]?post(?P<post>\d*))?"
    r"(?:[.-]?dev(?P<dev>\d*))?"
    r"(?:\+[a-z0-9.]*)?$",
    re.IGNORECASE,
)

_PRE = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
FINAL = 3
"""The stage of a release that is no pre-release (after ``a``, ``b``, ``rc``)."""

PARTS = 4
"""Release parts compared (shorter numbers are padded with zeros: ``0.24`` is ``0.24.0.0``)."""


def release_key(version: str) -> tuple[int, ...] | None:
    """``version`` as a tuple that orders releases as pip does; None when it is not a release number.

    ``(major, minor, patch, fourth, stage, stage number, post, not-dev)``:
    ``0.5.15.post1`` -> ``(0, 5, 15, 0, 3, 0, 1, 1)``; ``0.34.0rc1`` ->
    ``(0, 34, 0, 0, 2, 1, -1, 1)`` (no post release: -1); a development build without a pre-release
    stage comes before every pre-release of its number.
    """
    found = _NUMBER.match(version.strip())
    if found is None:
        return None
    parts = [int(p) for p in found["release"].split(".")][:PARTS]
    parts += [0] * (PARTS - len(parts))
    pre, post, dev = found["pre"], found["post"], found["dev"]
    stage = _PRE[pre.lower()] if pre else FINAL
    if dev is not None and pre is None and post is None:
        stage = -1  # 1.0.dev1 < 1.0a1
    return (*parts, stage, int(found["pre_n"] or 0), int(post or 0) if post is not None else -1,
            0 if dev is not None else 1)


def series_key(version: str) -> tuple[int, ...] | None:
    """The numbers and the post release alone (``0.5.13rc1`` -> ``(0, 5, 13, 0, -1)``, ``0.5.15.post1`` ->
    ``(0, 5, 15, 0, 1)``): which release's code a tree or build holds, where a pre-release or development
    build of X counts as X (release ranges, "from release X on" rules); None when ``version`` is not a
    release number."""
    key = release_key(version)
    return None if key is None else (*key[:PARTS], key[PARTS + 2])
