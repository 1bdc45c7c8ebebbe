"""The clone's unit tests run as a harness run: the plugin registers and loads the Hypothesis profiles
(``CROSSATTN_PROFILE``, ``ci`` in nox) and checks the ``CROSSATTN_*`` variables, as for the suite."""

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

crossattn_sizing_harness = True

# The call deadline (CROSSATTN_CALL_TIMEOUT, 60 s unless set) ends a release's call that takes longer and
# judges it "fails". Interpreted on a CPU, one of vLLM's kernel calls on a Nemotron-Parse page takes
# about 12 CPU s alone, and CI machines run two judges and their workers on 2 cores: the suite's verdicts
# must not depend on that load, so its calls get 10 minutes. Every test of the deadline itself sets its own
# (--call-timeout or the variable, 2 s), and a value the user set stands.
os.environ.setdefault("CROSSATTN_CALL_TIMEOUT", "600")


OURS = "crossattn-"
"""The prefix of every temporary folder the harness makes (``crossattn-fleet-``, ``crossattn-dcp-``, ...)."""


@pytest.fixture(scope="session", autouse=True)
def _no_temp_folder_left(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The session's system temp folder is a private one (``TMPDIR``, which every child inherits), and it
    holds no folder of the harness's after the last test: each is removed at exit, on success, on failure
    and on Ctrl-C. Private, so other runs on the machine cannot make this pass or fail."""
    folder = tmp_path_factory.mktemp("system-temp")
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(folder)
    tempfile.tempdir = None  # read TMPDIR again
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before
        tempfile.tempdir = None
    from crossattn_sizing.base.processes import end_children

    end_children()  # what this process still holds ends now, as it would at exit
    left = sorted(p.name for p in folder.iterdir() if p.name.startswith(OURS))
    for name in left:
        shutil.rmtree(folder / name, ignore_errors=True)
    assert not left, f"temporary folders left behind by the harness: {left}"
