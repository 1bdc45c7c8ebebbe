"""Reading JSON the user hands in (``--config`` text or files, regression files) as one object.

Every way such input can be wrong becomes one :class:`ConfigError` naming the
option (or file) and the rule: a missing or unreadable file, bytes that are
not UTF-8, text that is not JSON, JSON nested past what the parser takes (a
``RecursionError`` deep inside the decoder otherwise), a key given twice in one
object (the parser would keep the last silently: which one the user meant is
not known), an integer with thousands of digits (Python refuses to convert it,
with a ``ValueError`` from inside the decoder), or a value that is not an
object. A path is looked at before it is opened (:mod:`crossattn_sizing.base.pathkinds`): a
FIFO, a device, a symbolic link loop or an unreadable file is refused, never read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crossattn_sizing.base.errors import ConfigError
from crossattn_sizing.base.limits import MAX_INT_DIGITS, too_long
from crossattn_sizing.base.pathkinds import input_file_problem


def _shown(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


class _Refused(Exception):
    """Raised inside the decoder's hooks; turned into a ConfigError naming the option or file."""

    def __init__(self, field: str, value: object, rule: str) -> None:
        super().__init__(rule)
        self.field, self.value, self.rule = field, value, rule


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused("key", key, "appears twice in one JSON object; give each key once")
        out[key] = value
    return out


def _integer(text: str) -> int:
    if too_long(text):
        rule = f"JSON integers may have at most {MAX_INT_DIGITS} digits"
        raise _Refused("integer", f"<{len(text)} digits>", rule)
    return int(text)


def parse_json_object(field: str, source: str) -> Mapping[str, Any]:
    """JSON text as an object; ``field`` names where it came from in the error."""
    try:
        data = json.loads(source, object_pairs_hook=_object, parse_int=_integer)
    except _Refused as exc:
        raise ConfigError(f"{field}: {exc.field}", exc.value, exc.rule) from None
    except json.JSONDecodeError as exc:
        reason = f"is not valid JSON ({exc.msg} at line {exc.lineno})"
        raise ConfigError(field, _shown(source), reason) from None
    except RecursionError:
        raise ConfigError(field, _shown(source), "is JSON nested too deeply to read") from None
    if not isinstance(data, Mapping):
        raise ConfigError(field, _shown(source), f"must hold a JSON object, not a {type(data).__name__}")
    return data


def read_json_file(field: str, path: Path) -> Mapping[str, Any]:
    """The object a JSON file holds; ``field`` names the option or the file in the error."""
    problem = input_file_problem(path)
    if problem is not None:  # before opening it: a FIFO or /dev/zero would block or fill memory
        raise ConfigError(field, path.name if str(path) in field else str(path), problem)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        reason = f"cannot be read ({exc.strerror or type(exc).__name__})"
        raise ConfigError(field, str(path), reason) from None
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(field, str(path), f"is not UTF-8 text (byte {exc.start})") from None
    return parse_json_object(field, source)


def read_json_option(option: str, text: str) -> Mapping[str, Any]:
    """An option's value: JSON text (starts with ``{``) or the path of a JSON file."""
    if text.lstrip().startswith("{"):
        return parse_json_object(option, text)
    path = Path(text)
    problem = input_file_problem(path)
    if problem is not None and (os.path.isdir(path) or not os.path.lexists(path)):
        raise ConfigError(option, text, "must be JSON text or the path of a JSON file")
    return read_json_file(option, path)
