"""No profile turns a slow example into a verdict: none has a deadline, and each one passes the
slowest properties (a transformers model's forward per example) for a policy expected to hold.

Hypothesis's own default deadline (200 ms an example) made ``verify --hypothesis-profile replay``
report the built-in ``mrv2`` as failing (DeadlineExceeded) on a loaded machine. How long a call
into user code may take is bounded by its worker's ``--call-timeout``, never by a profile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import settings as hypothesis_settings

from crossattn_sizing.base.settings import PROFILES
from crossattn_sizing.runs import profiles

PROPERTIES = Path(__file__).resolve().parents[1] / "properties"


def derived_profiles() -> list[str]:
    """Every profile a run may load besides the six: ``--max-examples`` children, fuzz's rounds and
    the engine budget (each built from the loaded one)."""
    from crossattn_sizing.commands.fuzz import set_up_rounds
    from crossattn_sizing.engine.budget import PROFILE, load_engine_budget

    names = [profiles.with_max_examples(name, 3) for name in PROFILES]
    set_up_rounds(SimpleNamespace(examples_per_round=5), None, None)  # type: ignore[arg-type]
    names.append("fuzz-round")
    before = hypothesis_settings.get_current_profile_name()
    try:
        for name in PROFILES:  # the engine budget is made from whichever profile is loaded
            hypothesis_settings.load_profile(name)
            load_engine_budget()
            assert hypothesis_settings.get_profile(PROFILE).deadline is None, f"engine budget over {name}"
    finally:
        hypothesis_settings.load_profile(before)
    return names


def test_no_profile_of_the_harness_has_a_deadline() -> None:
    profiles.register_profiles()
    for name in [*PROFILES, *derived_profiles()]:
        assert hypothesis_settings.get_profile(name).deadline is None, name


def test_no_property_sets_a_deadline_of_its_own() -> None:
    """A property's own ``@settings(deadline=...)`` would bring one back under every profile."""
    for path in sorted(PROPERTIES.rglob("*.py")):
        assert "deadline" not in path.read_text(), f"{path.name} names a deadline"


def busy_cores() -> list[subprocess.Popen[bytes]]:
    """A spinning process per core (at most 4), each ending by itself once this process is gone."""
    spin = f"import os\nwhile os.getppid() == {os.getpid()}:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(min(4, os.cpu_count() or 1))]


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_passes_the_transformers_properties_for_mrv2_with_every_core_busy(
    profile: str, tmp_path: Path
) -> None:
    """The issue's command under each profile, one example per property (the pinned one where the
    profile runs only those): every property holds, exit 0. Nothing here reads a clock."""
    out = tmp_path / "verify.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSATTN_")}
    env["CROSSATTN_DB"] = str(tmp_path / "examples")  # dev, nightly, gpu and reuse keep a database
    argv = ["verify", "--policy", "mrv2", "--hypothesis-profile", profile, "--max-examples", "1",
            "-k", "cross_attention_matches_transformers", "--json", str(out)]  # fmt: skip
    busy = busy_cores()
    try:
        done = subprocess.run([sys.executable, "-m", "crossattn_sizing", *argv], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=900)  # fmt: skip
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    said = done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0, said
    report = json.loads(out.read_text())
    assert report["profile"] == profile
    found = report["policies"][0]["properties"]
    assert len(found) >= 3, said  # bart, mbart and whisper at least (the transformers families)
    for prop in found:
        assert prop["outcome"] == "holds" and prop["examples"] >= 1, prop
