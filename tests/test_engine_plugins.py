"""An engine family from an installed package (entry-point group ``crossattn_sizing.engines``), with no edit
to the harness: it is found, it runs, and a broken one is one line naming its entry point.

The package is written into a temporary folder with its ``.dist-info`` (what pip installs: its
``METADATA`` and ``entry_points.txt``) and put on ``PYTHONPATH`` of a child process, so the harness finds
it exactly as it finds an installed plug-in; the child runs the CLI's ``main`` once per command line and
prints each exit status and output as JSON (one interpreter start for all of them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

FAKE = textwrap.dedent('''
    """A stand-in engine family, declared by an installed package (the test's)."""
    from pathlib import Path

    from crossattn_sizing.base.errors import ReleaseUnavailable
    from crossattn_sizing.engine.interface import EngineMode, EngineSuite, ReleaseRange, WrongMode


    class FakeFamily:
        name = "fake"
        mode = EngineMode.PROPERTIES
        ranges = (ReleaseRange("1.0", None, own_code=("fake/sizing.py: size",)),)

        def check_spec(self, spec, option="--engine"):
            if not spec.strip().startswith("fake=="):
                raise ReleaseUnavailable(f"{option} {spec.strip()}: expected fake==X")
            return spec.strip()

        def refused(self, command):
            return {"--policy": "the fake engine answers itself", "--impl": "the fake engine answers itself"}

        def obtain(self, spec, call_timeout=None):
            return ""

        def tree(self, spec):
            return Path(__file__).parent

        def report_facts(self):
            return None

        def verify_suite(self, spec):
            return EngineSuite(files=("properties/test_read_coverage.py",),
                               pytest_args=("--read-builder", spec))

        def property_fixture(self, spec, deadline=None):
            from crossattn_sizing.core.read_gather import BUILDERS

            return BUILDERS["bounded"]

        def sizer(self, spec, deadline=None):
            raise WrongMode(self.name, self.mode, "sizer")

        def command(self, name):
            def run(spec, args):
                print(f"the fake engine ran {name} on {spec}")
                return 0

            return run if name == "check" else None

        def unsupported(self, name):
            return f"{name} has no fake run"


    FAMILY = FakeFamily()
''')

HOLLOW = 'class Hollow:\n    name = "hollow"\n\n\nFAMILY = Hollow()\n'

ENTRY_POINTS = """\
[crossattn_sizing.engines]
fake = door_fake_engine
broken = door_broken_engine:FAMILY
hollow = door_hollow_engine:FAMILY
vllm = door_fake_engine:FAMILY
"""

DRIVER = textwrap.dedent("""
    import contextlib, io, json, sys
    from crossattn_sizing.commands.cli import main

    results = []
    for argv in json.loads(sys.argv[1]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(argv)
        results.append({"status": status, "out": out.getvalue(), "err": err.getvalue()})
    print(json.dumps(results))
""")

COMMANDS = [
    ["check", "--engine", "fake==1.0"],
    ["check", "--engine", "broken==1.0"],
    ["check", "--engine", "hollow==1.0"],
    ["check", "--engine", "nope==1.0"],
    ["check", "--engine", "fake==1.0", "--policy", "mrv2"],
    ["check", "--engine", "vllm==0.24.0", "--config", "{}", "--encoder-len", "1"],
]


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Each of :data:`COMMANDS` run with the plug-ins installed (on ``PYTHONPATH``, with their dist-info)."""
    site = tmp_path_factory.mktemp("site")
    (site / "door_fake_engine.py").write_text(FAKE)
    (site / "door_broken_engine.py").write_text("import door_no_such_module  # noqa: F401\n")
    (site / "door_hollow_engine.py").write_text(HOLLOW)
    info = site / "door_fake_engine-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: door-fake-engine\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    home = str(tmp_path_factory.mktemp("home"))
    env = {**os.environ, "PYTHONPATH": path, "HOME": home, "CROSSATTN_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(COMMANDS)], env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_an_installed_family_runs_with_no_edit_to_the_harness(answers: list[dict[str, Any]]) -> None:
    assert answers[0] == {"status": 0, "out": "the fake engine ran check on fake==1.0\n", "err": ""}


def test_a_family_that_cannot_be_imported_is_one_line_naming_its_entry_point(answers: list[Any]) -> None:
    broken = answers[1]
    assert broken["status"] == 2 and broken["out"] == ""
    assert broken["err"].count("\n") == 1, broken["err"]
    assert ("--engine broken==1.0: engine broken (entry point crossattn_sizing.engines: "
            "door_broken_engine:FAMILY of door-fake-engine) cannot be loaded: ModuleNotFoundError: "
            "No module named 'door_no_such_module'") in broken["err"]


def test_an_object_that_is_not_a_family_is_one_line_saying_what_it_lacks(answers: list[Any]) -> None:
    hollow = answers[2]
    assert hollow["status"] == 2 and hollow["err"].count("\n") == 1, hollow
    assert "engine hollow (entry point crossattn_sizing.engines: door_hollow_engine:FAMILY" in hollow["err"]
    assert "is not an engine family: it has no mode, ranges, check_spec" in hollow["err"]


def test_installed_families_are_named_beside_the_built_in_ones(answers: list[dict[str, Any]]) -> None:
    unknown = answers[3]
    assert unknown["status"] == 2
    assert ("names no engine the harness runs (engines: vllm==X, vllm@PATH, sglang==X, sglang@PATH, "
            "tensorrt_llm==X, tensorrt_llm@PATH, broken==X, broken@PATH, fake==X, fake@PATH, hollow==X, "
            "hollow@PATH)") in unknown["err"]


def test_an_installed_family_gets_the_option_refusals_of_any_other(answers: list[dict[str, Any]]) -> None:
    refused = answers[4]
    assert refused["status"] == 2
    said = "--policy mrv2: does not apply with --engine fake==1.0: the fake engine answers itself"
    assert said in refused["err"]


def test_an_entry_point_never_replaces_a_built_in_family(answers: list[dict[str, Any]]) -> None:
    """``vllm = door_fake_engine:FAMILY`` is ignored: ``--engine vllm==X`` is still vLLM's (which, offline
    with an empty cache, cannot obtain the release: its own one line, not the fake's output)."""
    built_in = answers[5]
    assert built_in["status"] == 2 and "fake engine" not in built_in["out"] + built_in["err"], built_in
