"""Installed, the plugin is loaded by every pytest run on the machine: another project's run must not
notice it. No header line, no option needed, no torch import, no Hypothesis profile loaded, Ctrl-C left
alone, the same results, even with ``CROSSATTN_*`` variables set (some of them to values the harness
would refuse). The meta-test runs the same project as a harness run and sees each of these change.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.processes import run

UNRELATED_TEST = '''
import signal
import sys

from hypothesis import given, settings, strategies as st
from hypothesis.errors import InvalidArgument


def test_the_plugin_is_loaded_and_nothing_else(request):
    assert request.config.pluginmanager.has_plugin("crossattn_sizing")  # installed: loaded by pytest
    assert "torch" not in sys.modules
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert settings.default.max_examples == settings.get_profile("default").max_examples
    try:
        settings.get_profile("nightly")
    except InvalidArgument:
        pass
    else:
        raise AssertionError("the harness's Hypothesis profiles were registered")


@given(st.integers())
def test_a_property_of_its_own(x):
    assert x + 0 == x
'''

HOSTILE_ENV = {
    "CROSSATTN_PROFILE": "nightly",  # 5000 examples, were it loaded
    "CROSSATTN_SIZING_POLICY": "no_such_module:policy",
    "CROSSATTN_IMPL": "vllm==0.25.0",  # would start a release's worker for the report header
    "CROSSATTN_DEVICE": "tpu",
    "CROSSATTN_DCP_TIMEOUT": "soon",
    "CROSSATTN_REDIS_URL": "redis://127.0.0.1:1/0",  # nothing listens there
}


def project(tmp_path: Path, *, harness: bool = False) -> Path:
    root = tmp_path / "unrelated"
    root.mkdir()
    (root / "test_unrelated.py").write_text(UNRELATED_TEST)
    if harness:
        (root / "conftest.py").write_text("crossattn_sizing_harness = True\n")
    return root


def pytest_in(root: Path, *args: str, variables: dict[str, str] = HOSTILE_ENV) -> tuple[int, str]:
    home = root.parent / "home"
    home.mkdir(exist_ok=True)
    env = {**variables, "HOME": str(home), "XDG_CACHE_HOME": str(home / "cache"),
           "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "pytest", str(root), "--rootdir", str(root), "-p", "no:cacheprovider",
               "-c", os.devnull, *args]
    done = run(command, env=env)
    return done.returncode, done.stdout + done.stderr


def test_an_unrelated_project_runs_as_if_the_plugin_were_not_there(tmp_path: Path) -> None:
    code, out = pytest_in(project(tmp_path))
    assert code == 0, out
    assert "2 passed" in out
    # pytest's own header lists every installed plugin distribution ("plugins: crossattn-sizing-0.1.0,
    # hypothesis-..."): pytest's line, printed for any plugin, not one of the harness's.
    lines = [line for line in out.splitlines() if not line.startswith("plugins:")]
    ours = [line for line in lines if "crossattn" in line.lower()]
    assert ours == [], out
    without_code, without = pytest_in(tmp_path / "unrelated", "-p", "no:crossattn_sizing")
    # The same results with the plugin blocked (the first test then fails on its has_plugin line only).
    assert without_code == 1 and "1 passed" in without and "has_plugin" in without


def test_the_same_project_as_a_harness_run_is_seen_by_each_check(tmp_path: Path) -> None:
    """Meta-test: when the plugin does act (a conftest makes it a harness run), the checks above see it."""
    code, out = pytest_in(project(tmp_path, harness=True))
    assert code != 0
    assert "CROSSATTN_" in out  # the first refused variable, named
    # Variables the harness accepts: the run starts, and the project's own checks see the harness.
    accepted = {"CROSSATTN_PROFILE": "nightly", "CROSSATTN_SIZING_POLICY": "mrv2", "CROSSATTN_IMPL": "torch"}
    code, out = pytest_in(tmp_path / "unrelated", variables=accepted)
    assert code == 1 and "1 passed" in out, out
    assert "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler" in out, out


def test_pyargs_names_the_suite_only_when_it_collects_it() -> None:
    from crossattn_sizing.runs.pytest_plugin import _holds_the_suite

    assert _holds_the_suite("crossattn_sizing.properties")
    assert _holds_the_suite("crossattn_sizing.properties.test_capacity")
    assert _holds_the_suite("crossattn_sizing")  # collects everything below, the suite included
    assert not _holds_the_suite("crossattn_sizing.prop")
    assert not _holds_the_suite("crossattn_sizing.propertiesx")
    assert not _holds_the_suite("crossattn")
    assert not _holds_the_suite("myproject.tests")
