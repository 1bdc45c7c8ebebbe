"""Reading JSON the user hands in (``--config`` text or files, regression files) as one object.

Every way such input can be wrong becomes one :class:`ConfigError` naming the
option (or file) and the rule: a missing or unreadable file, bytes that are
not UTF-8, text that is not JSON, JSON nested past what the parser takes (a
``RecursionError`` deep inside the decoder otherwise), or a value that is not
an object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crossattn_sizing.errors import ConfigError


def _shown(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def parse_json_object(field: str, source: str) -> Mapping[str, Any]:
    """JSON text as an object; ``field`` names where it came from in the error."""
    try:
        data = json.loads(source)
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
    if not path.is_file():
        raise ConfigError(option, text, "must be JSON text or the path of a JSON file")
    return read_json_file(option, path)
