"""``crossattn-sizing reproduce``: the Nemotron-Parse regression and the real-config verdicts.

The two verdicts are run end to end through the console script, as a user
runs them; the other shapes in-process through ``cli.main`` (same parser, same
error handling, no interpreter start-up per case).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="the 'hf' extra is not installed")

from crossattn_sizing.commands.cli import main

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crossattn_sizing", "reproduce", *args],
        capture_output=True, text=True, timeout=600, env=ENV,
    )


@pytest.mark.slow
def test_nemotron_parse_before_the_fix_fails_with_the_diagnosis() -> None:
    proc = run_cli("nemotron-parse", "--policy", "mrv2-prefix")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "3329 per request" in out
    assert "S=absent" in out
    assert "tokens 2048..3328 (1281 tokens) have no column" in out
    assert "needed 209 columns, given 128" in out
    assert "81 entries spill into the next row" in out
    assert "guarded:   refused on the host before any kernel runs" in out
    assert "output drift vs the correctly-sized run: max abs error" in out
    drift = float(out.split("max abs error ")[1].split()[0])
    assert drift > 1e-3  # request 0 attends over request 1's keys for its last 1281 tokens
    assert "crossattn-sizing check --policy mrv2-prefix" in out
    assert proc.stderr == ""


@pytest.mark.slow
def test_nemotron_parse_after_the_fix_is_safe_and_says_why() -> None:
    proc = run_cli("nemotron-parse")  # --policy mrv2 is the default
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "width 256 columns = 4096 tokens >= admitted bound 4096 = max_num_encoder_input_tokens" in out
    assert "3329 encoder tokens need 209 columns" in out
    assert "output matches the correctly-sized run (max abs error 0" in out


@pytest.mark.slow
def test_bad_input_through_the_console_script_is_one_line_exit_2() -> None:
    proc = run_cli("nemotron-parse", "--image-size", "2048by1664")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "crossattn-sizing: error: invalid config: --image-size='2048by1664': must be HEIGHTxWIDTH in "
        "pixels, e.g. 2048x1664"
    ]


def reproduce(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["reproduce", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_the_summary_token_alone_is_missing_at_m_3328(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = reproduce(capsys, "nemotron-parse", "--policy", "mrv2-prefix", "--max-model-len", "3328")
    assert status == 1
    assert "tokens 3328..3328 (1 tokens) have no column" in out


def test_nemotron_parse_at_its_default_max_model_len_is_safe_before_the_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = reproduce(capsys, "nemotron-parse", "--policy", "mrv2-prefix", "--max-model-len", "9000")
    assert status == 0
    assert ">= 3329 encoder tokens, the most a request of this model has" in out


def test_the_smaller_page_fits_a_3328_token_row(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = reproduce(
        capsys, "nemotron-parse", "--image-size", "2048x1648", "--policy", "mrv2-prefix",
        "--max-model-len", "3328",
    )
    assert status == 0
    assert "3201 per request" in out


def test_whisper_is_safe_before_and_after_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = reproduce(capsys, "whisper", "--policy", "mrv2-prefix")
    assert status == 0
    assert "width 96 columns = 1536 tokens >= 1500 encoder tokens" in out
    assert "max_source_positions=1500" in out
    status, out, _ = reproduce(capsys, "whisper")
    assert status == 0
    assert "width 128 columns = 2048 tokens >= admitted bound 2048" in out


def test_bart_below_its_source_length_fails_before_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = reproduce(capsys, "bart", "--policy", "mrv2-prefix", "--max-model-len", "512")
    assert status == 1
    assert "tokens 512..1023 (512 tokens) have no column" in out
    status, out, _ = reproduce(capsys, "bart", "--max-model-len", "512")
    assert status == 0


def test_dcp_is_judged_but_not_simulated(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = reproduce(capsys, "nemotron-parse", "--dcp", "2", "--policy", "mrv2-prefix")
    assert status == 1
    assert "needed 105 columns, given 64 (32 tokens per column)" in out
    assert "not simulated with --dcp > 1" in out


def test_a_transformers_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from crossattn_sizing.models.nemotron_parse_config import NemotronParseConfig

    path = tmp_path / "config.json"
    NemotronParseConfig(image_size=[2048, 1664]).to_json_file(str(path))
    status, out, _ = reproduce(
        capsys, "--config", str(path), "--policy", "mrv2-prefix", "--max-model-len", "2048"
    )
    assert status == 1
    assert "tokens 2048..3328 (1281 tokens) have no column" in out
    status, out, _ = reproduce(capsys, "--config", str(path), "--max-model-len", "2048")
    assert status == 0


def test_a_harness_runner_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runner.json"
    groups = [{"kind": "cross", "block_size": 16}]
    path.write_text(json.dumps({"max_model_len": 2048, "max_num_batched_tokens": 4096, "groups": groups}))
    status, out, _ = reproduce(
        capsys, "--config", str(path), "--policy", "mrv2-prefix", "--encoder-len", "3329"
    )
    assert status == 1
    assert "tokens 2048..3328 (1281 tokens) have no column in cross group 0" in out
    status, out, _ = reproduce(capsys, "--config", str(path))
    assert status == 0
    assert "4096 per request: the admitted bound" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give a model name or --config FILE"),
        (["t5"], "model='t5': must be one of"),
        (["whisper", "--image-size", "2048x1664"], "applies to nemotron-parse, not 'whisper'"),
        (["whisper", "--max-model-len", "2048"], "max_model_len=2048: must be <= 448"),
        (["nemotron-parse", "--block-size", "0"], "--block-size 0: must be >= 1"),
        (["nemotron-parse", "--dcp", "two"], "--dcp 'two': must be an integer"),
        (["nemotron-parse", "--image-size", "8x8"], "must be at least 16x64 pixels"),
        (["nemotron-parse", "--policy", "nope"], "unknown sizing policy 'nope'"),
        (["bart", "--encoder-len", "2000"], "must be 1..1024"),
        (["whisper", "--impl", "no_such_mod:impl"], "implementation 'no_such_mod:impl'"),
        (["whisper", "--seed", "-1"], "--seed -1: must be >= 0"),
        (["--config", "/no/such/file.json"], "must be JSON text or the path of a JSON file"),
        (["--config", "{not json"], "is not valid JSON"),
        (["--config", '{"d_model": 4}'], "neither a transformers config"),
        (["--config", '{"model_type": "no-such-model"}'], "transformers cannot build this config"),
        (["--config", '{"max_model_len": 8, "max_num_batched_tokens": 8, "groups": [{"kind": "full", '
                      '"block_size": 16}]}'], "has no cross-attention group"),
        (["--config", '{"max_model_len": 8, "max_num_batched_tokens": 8, "groups": [{"kind": "cross", '
                      '"block_size": 16}]}', "--block-size", "32"], "edit the RunnerConfig JSON"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    status, out, err = reproduce(capsys, *args)
    assert status == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert out == ""
