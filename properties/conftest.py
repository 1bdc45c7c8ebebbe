"""The property suite's conftest: it makes a pytest run of the suite a harness run, and checks the
suite's own inputs at start-up.

``crossattn_sizing_harness`` tells the installed plugin that this run is the
harness's (any other project's pytest run is left alone). The regression files
are read when the capacity properties are collected; a malformed one would
surface as a collection traceback in every run. Reading them here first turns
it into pytest's usage error: one line naming the file and the rule, before
any test runs.
"""

from __future__ import annotations

import pytest

from crossattn_sizing.errors import HarnessError
from crossattn_sizing.runs import pytest_plugin

from .regressions import pinned_cases, use_regression_files

crossattn_sizing_harness = True


def pytest_configure(config: pytest.Config) -> None:
    pytest_plugin.join(config)  # a no-op when the run started from the command line, as it usually does
    use_regression_files(pytest_plugin.regression_files(config))
    try:
        pinned_cases()
    except HarnessError as exc:
        raise pytest_plugin.usage_error(config, str(exc)) from None


def pytest_unconfigure(config: pytest.Config) -> None:
    use_regression_files(pytest_plugin.RegressionFiles())  # the next in-process run reads its own options
