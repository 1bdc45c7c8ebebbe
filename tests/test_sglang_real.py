"""SGLang 0.5.23's real wheel (``nox -s engine``; downloads 39 MB once into the engine cache).

- the recorded fixture's kept lines are the wheel's own, line for line;
- ``verify --engine sglang==0.5.23`` reports the read side failing with a shrunk
  mixed batch and the write side holding;
- the unpacked wheel with the gather bounded per request holds the read side;
- every audited release runs its own admission steps (limits, input check, output cap);
- every audited release builds a request as the admission's stand-in holds it (its own ``Req.__init__``
  and models' ``pad_input_ids``: tests/sglang_request.py);
- every release from 0.5.13 captures its own CUDA-graph dummy batch (engine/sglang/startup.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

if os.environ.get("CROSSATTN_ENGINE_TESTS") != "1":
    pytest.skip("the real SGLang wheel (39 MB): run by `nox -s engine` (CROSSATTN_ENGINE_TESTS=1)",
                allow_module_level=True)

from crossattn_sizing.core.admission_rules import EngineRequest, SglangAdmission
from crossattn_sizing.engine.sglang.client import OwnAdmission, SglangReads
from crossattn_sizing.engine.sglang.install import resolve_sglang
from crossattn_sizing.engine.sglang.releases import AUDIT_RELEASES, range_for
from tests.sglang_request import PAD, differences
from tests.sglang_tree import EAGER_BOUNDED, EAGER_LINE, FA3, FIXTURE, REPLAY_BOUNDED, REPLAY_LINE

pytestmark = pytest.mark.engine
SPEC = "sglang==0.5.23"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel_root() -> Path:
    return resolve_sglang(SPEC)[0]


def test_fixture_lines_are_the_wheel_s(wheel_root: Path) -> None:
    for recorded in FIXTURE.rglob("*.py"):
        rel = recorded.relative_to(FIXTURE)
        real = (wheel_root / rel).read_text().splitlines()
        kept = recorded.read_text().splitlines()
        assert len(kept) == len(real), rel
        assert all(k in ("", r) for k, r in zip(kept, real, strict=True)), rel


def test_verify_engine_reports_read_failing_and_write_holding() -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CROSSATTN_PROPERTIES": str(ROOT / "properties")}
    out = subprocess.run([sys.executable, "-m", "crossattn_sizing", "verify", "--engine", SPEC],
                         capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {cells[0]: cells[1] for ln in out.stdout.splitlines()  # verify's table: property | verdict
            if len(cells := [c.strip() for c in ln.strip("│┃ ").split("│")]) == 2}
    assert rows["test_read_coverage::test_gathers_stay_in_row_and_own_columns"] == "fails"
    assert rows["test_read_coverage::test_admitted_requests_fit_their_shared_row"] == "holds"
    assert "request 1: encoder 0" in out.stdout or "request 0: encoder 0" in out.stdout  # mixed batch
    assert f"reproduce: crossattn-sizing check --engine {SPEC}" in out.stdout


def test_bounded_wheel_copy_holds(wheel_root: Path, tmp_path: Path) -> None:
    import shutil

    tree = tmp_path / "bounded"
    shutil.copytree(wheel_root / "sglang", tree / "sglang")
    path = tree / FA3
    text = path.read_text()
    path.write_text(text.replace(EAGER_LINE, EAGER_BOUNDED).replace(REPLAY_LINE, REPLAY_BOUNDED))
    assert SglangReads(f"sglang@{tree}").first_problem(8192, [(6404, 20, 21), (0, 3000, 3001)]) is None
    kind, line = SglangReads(SPEC).first_problem(8192, [(6404, 20, 21), (0, 3000, 3001)])
    assert kind == "fails" and "column 8196" in line


def test_audit_release_table_names_the_first_overflow() -> None:
    """``audit --engine sglang`` on every audited release (downloads each wheel once): slices up to
    0.5.12.post1, the per-request gather and the read overflow from 0.5.13, rows from each release's code."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-m", "crossattn_sizing", "audit", "--engine", "sglang"],
                         capture_output=True, text=True, timeout=1800, env=env, cwd=ROOT)
    assert out.returncode == 1, out.stderr
    rows = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()
            if line.startswith("sglang==") and ":" not in line.split()[0]}
    assert rows["sglang==0.5.12.post1"][:1] == ["slice"]
    assert rows["sglang==0.5.13"][:3] == ["per-request", "gather", "fails"]
    assert rows["sglang==0.5.23"][:3] == ["per-request", "gather", "fails"]
    first = "first release with the overflow: sglang==0.5.13 (FA3 text table: per-request gather)"
    assert first in out.stdout
    assert "first release whose capture dummy is longer than its row: sglang==0.5.13" in out.stdout


STARTUP_RELEASES = AUDIT_RELEASES[AUDIT_RELEASES.index("0.5.13"):]


@pytest.mark.parametrize("version", STARTUP_RELEASES)
def test_every_release_from_0_5_13_captures_its_own_dummy_batch(version: str) -> None:
    """Each release's own runner fill and FA3 capture code (downloads each wheel once): Whisper's 1500
    encoder tokens fill every dummy; the capture holds at context 2048 and its dummy is past its row at
    1024, at the release's own runner line."""
    from crossattn_sizing.engine.sglang.client import SglangStartup
    from crossattn_sizing.engine.sglang.startup_client import StartupServer

    judge = SglangStartup(f"sglang=={version}")
    assert judge.verdicts(StartupServer(2048, (1, 2, 4), 4, 1500))["capture"] == {"verdict": "holds"}
    short = judge.verdicts(StartupServer(1024, (1, 2), 2, 1500))["capture"]
    assert short["verdict"] == "fails" and "columns [0, 1501) of its row, which has 1028" in short["message"]
    assert "cuda_graph_runner.py:" in short["where"]


@pytest.mark.parametrize("version", AUDIT_RELEASES)
def test_every_release_runs_its_own_admission(version: str) -> None:
    """Each release's TpModelWorker limits, validate_input_length and init_req_max_new_tokens run as its
    own code (downloads each wheel once); on every release they agree with the harness's model."""
    rule = SglangReads(f"sglang=={version}").admission(2048, 4096)
    assert isinstance(rule, OwnAdmission), rule
    model = SglangAdmission(2048, 4096)
    assert (rule.max_req_len, rule.max_req_input_len) == (model.max_req_len, model.max_req_input_len)
    assert rule.refusal(EngineRequest(1500, 542)) is not None  # input == max_req_input_len
    assert rule.refusal(EngineRequest(1500, 541)) is None
    long_output = EngineRequest(1500, 400, 10**6)
    assert rule.output_cap(long_output) == model.output_cap(long_output)


@pytest.mark.parametrize("version", AUDIT_RELEASES)
@pytest.mark.parametrize("model", sorted(PAD))
def test_every_release_builds_the_stand_in_s_request(version: str, model: str) -> None:
    """The admission's stand-in request (stand_in_fields.REQUEST_FIELDS) against the release's own
    construction: the encoder placeholders and the prompt in ``origin_input_ids``, the prompt alone in
    ``origin_input_ids_unpadded``, in the release's list or ``array('q')``."""
    root = resolve_sglang(f"sglang=={version}")[0]
    if not (root / PAD[model][0]).is_file():  # the release does not serve this model: nothing to compare
        pytest.skip(f"sglang=={version} has no {PAD[model][0]}")
    rng, _ = range_for(root)
    for encoder_len, prompt_len in [(0, 5), (3, 5), (1500, 20)]:
        assert differences(root, rng, encoder_len, prompt_len, model) == [], (encoder_len, prompt_len)
