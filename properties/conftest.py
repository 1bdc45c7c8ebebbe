"""Start-up checks of the property suite's own inputs.

The regression files are read when the capacity properties are collected; a
malformed one would surface as a collection traceback in every run. Reading
them here first turns it into pytest's usage error: one line naming the file
and the rule, before any test runs.
"""

from __future__ import annotations

import pytest

from crossattn_sizing.errors import HarnessError
from crossattn_sizing.runs.pytest_plugin import usage_error


def pytest_configure(config: pytest.Config) -> None:
    from .regressions import pinned_cases

    try:
        pinned_cases()
    except HarnessError as exc:
        raise usage_error(str(exc)) from None
