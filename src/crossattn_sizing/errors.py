"""The harness's error types.

Every user-facing failure that is the user's input (a config, a policy path, a
device) is one of these, so the CLI and the pytest plugin can print a single
clear line and exit non-zero instead of a traceback from deep inside.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base class of errors the CLI reports as one line with a non-zero exit."""


class ConfigError(HarnessError, ValueError):
    """A runner config that the engine would refuse at start-up.

    Carries the offending field, its value and the rule it breaks, so a message
    always reads ``field=value: rule``.
    """

    def __init__(self, field: str, value: object, rule: str) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        super().__init__(f"invalid config: {field}={value!r}: {rule}")


class PolicyLoadError(HarnessError, ValueError):
    """A sizing policy (or implementation) named by the user could not be loaded."""


class DeviceError(HarnessError, RuntimeError):
    """A device was required (``--device cuda``) but is not available."""
