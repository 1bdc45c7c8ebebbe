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

import importlib.util

import pytest

from crossattn_sizing.base.errors import HarnessError
from crossattn_sizing.runs import pytest_plugin

from .regressions import pinned_cases, use_regression_files

crossattn_sizing_harness = True


TORCH_HINT = "pip install 'crossattn-sizing[all]' (or [torch], the least the suite runs with)"


def pytest_configure(config: pytest.Config) -> None:
    """Refuse a suite without torch in one line, then join the harness run and its regression files."""
    # Every implementation property imports torch: a wheel installed without the extra is told which
    # to add in one line, not five collection tracebacks.
    if importlib.util.find_spec("torch") is None:
        raise pytest_plugin.usage_error(config, f"the property suite needs torch, which is not installed: "
                                                f"{TORCH_HINT}")
    pytest_plugin.join(config)  # a no-op when the run started from the command line, as it usually does
    use_regression_files(pytest_plugin.regression_files(config))
    try:
        pinned_cases()
    except HarnessError as exc:
        raise pytest_plugin.usage_error(config, str(exc)) from None


def pytest_unconfigure(config: pytest.Config) -> None:
    """Forget this run's regression files, so the next in-process run reads its own options."""
    use_regression_files(pytest_plugin.RegressionFiles())  # the next in-process run reads its own options


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The SGLang attention and start-up properties run a tree's own code: collected without one (an engine
    spec, its family's property fixture), a usage error."""
    from crossattn_sizing.engine.registry import engine_name, is_engine

    builder = str(config.getoption("read_builder")).strip()
    names = {item.path.name for item in items}
    if names & {"sglang_attention.py", "sglang_startup.py"} and not (
            is_engine(builder) and engine_name(builder) != builder):
        from .sglang_attention import NEEDS_TREE
        from .sglang_startup import NEEDS_TREE as STARTUP_NEEDS_TREE

        raise pytest_plugin.usage_error(
            config, NEEDS_TREE if "sglang_attention.py" in names else STARTUP_NEEDS_TREE)
