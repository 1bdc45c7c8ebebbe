"""vLLM's start-up batches (profile, warm-up, CUDA-graph capture) through each recorded release's own code.

The releases' ``_dummy_run``, ``InputBatch.make_dummy``, ``get_dummy_slot_mappings``
and ``max_encoder_len`` run from tests/fixtures/vllm/ (no wheel); the rows they
are judged against are the release's own sizing for 0.24.0 and 0.25.0
(``initialize_kv_cache``, executed), and for 0.34.0 the modelled ``mrv2``
policy: 0.34.0's sizing reads ``max_num_blocks_per_req`` and
``get_block_table_width`` from files not recorded (the real-wheel session,
``nox -s engine``, runs it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, find, given, settings

from crossattn_sizing.commands.cli import main
from crossattn_sizing.core.config import KVCacheGroup, RunnerConfig
from crossattn_sizing.core.policies import BUILTIN_POLICIES
from crossattn_sizing.core.startup_checks import Row, column_breaches, length_breaches, slot_breaches
from crossattn_sizing.engine.adapter import StandInReached
from crossattn_sizing.engine.vllm import startup as su
from properties.startup_assertions import assert_startup_holds
from properties.startup_strategies import startup_settings
from tests.engine_tree import FIXTURES, build_tree
from tests.test_engine_fixture import _fixture_blocks

FULL_16 = (KVCacheGroup("full", 16),)
ENC_DEC_16 = (KVCacheGroup("full", 16), KVCacheGroup("cross", 16))
FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _texts(version: str, **replace: str) -> dict[str, str]:
    own = FIXTURES / version
    table = (
        own / "block_table.py"
        if (own / "block_table.py").is_file()
        else FIXTURES / "0.25.0" / "block_table.py"
    )
    texts = {
        su.RUNNER_FILE: (own / "model_runner.py").read_text(),
        su.BATCH_FILE: (own / "input_batch.py").read_text(),
        su.TABLE_FILE: table.read_text(),
        su.ENC_DEC_FILE: (own / "encoder_decoder.py").read_text(),
    }
    for key, text in replace.items():
        texts[getattr(su, key)] = text
    return texts


def _run(version: str, **replace: str) -> su.StartupRun:
    texts = _texts(version, **replace)
    return su.StartupRun(su.StartupSource.from_texts(version, texts), su.seq_lens_line(texts[su.BATCH_FILE]))


RUNS = {v: _run(v) for v in ("0.24.0", "0.25.0", "0.34.0")}


def _widths(version: str, config: RunnerConfig) -> list[int]:
    if version == "0.34.0":
        return list(BUILTIN_POLICIES["mrv2"](config))
    return _fixture_blocks(version, config)


def _verdict(version: str, config: RunnerConfig, sizes: tuple[int, ...], run: su.StartupRun | None = None):  # type: ignore[no-untyped-def]
    return su.judge(run or RUNS[version], config, sizes, _widths(version, config))


# The release's own split, by hand --------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "capture_8", "line"),
    [("0.24.0", (2, 2, 4), 117), ("0.25.0", (2, 2, 4), 123), ("0.34.0", (2, 3, 3), 165)],
)
def test_dummy_lengths_are_each_releases_own_split(
    version: str, capture_8: tuple[int, ...], line: int
) -> None:
    """B=1000, three sequences: 333, 333, 334 everywhere; 8 tokens: 0.24/0.25 give the last request the
    remainder, 0.34 spreads it (input_batch.py's ``seq_lens`` line named)."""
    s = su.Settings(max_model_len=256, max_num_batched_tokens=1000, max_num_seqs=3, capture_sizes=(8,))
    batches = {b.purpose: b for b in RUNS[version].batches(s)}
    assert batches["profile"].seq_lens == (333, 333, 334) and not batches["profile"].attention
    assert batches["warm-up 1000"].seq_lens == (333, 333, 334) and batches["warm-up 1000"].attention
    assert batches["capture 8"].seq_lens == capture_8
    assert batches["capture 8"].scheduled == capture_8  # _dummy_run's split is make_dummy's
    assert batches["sampler warm-up 3"].seq_lens == (1, 1, 1)
    assert set(batches["capture 8"].slots) == {-1}
    assert batches["capture 8"].where == f"vllm/v1/worker/gpu/input_batch.py:{line}"


@pytest.mark.parametrize("version", ["0.24.0", "0.25.0", "0.34.0"])
def test_encoder_length_is_source_positions_else_max_model_len(version: str) -> None:
    base = su.Settings(max_model_len=2048, max_num_batched_tokens=4096, max_num_seqs=2, capture_sizes=())
    assert RUNS[version].encoder_length(base) == 2048
    with_s = su.Settings(2048, 4096, 2, (), max_source_positions=1500)
    assert RUNS[version].encoder_length(with_s) == 1500


# The judges, by hand and on broken input -----------------------------------------------------------


def test_judges_by_hand() -> None:
    rows = [Row("full", 128, 16), Row("cross", 128, 16), Row("mamba", 1, 16)]
    assert not length_breaches("b", [2048], rows, 2048)
    assert not column_breaches("b", [2048], rows, 2048)
    assert [b.found for b in length_breaches("b", [2049], rows, 2048)] == [2049]
    assert [(b.group, b.found) for b in column_breaches("b", [2049], rows, 2049)] == [(0, 128), (1, 128)]
    assert [b.found for b in column_breaches("b", [4096], [Row("full", 128, 16, dcp=2)], None)] == []
    assert slot_breaches("b", [2, 1], [-1, -1, -1]) == []
    assert [(b.request, b.found) for b in slot_breaches("b", [2, 1], [-1, -1, 5])] == [(1, 5)]


# Properties over drawn settings ------------------------------------------------------------------------


@FEW
@given(drawn=startup_settings(within_warning=True, dcp=False))
def test_0_34_start_up_batches_fit_their_rows(drawn: tuple[RunnerConfig, tuple[int, ...]]) -> None:
    """0.34.0 spreads the remainder: no dummy request is longer than ceil(B / N) <= M while B <= N * M.
    (DCP is drawn apart: a cross row under C > 1 is the open DCP finding, below.)"""
    config, sizes = drawn
    assert_startup_holds(_verdict("0.34.0", config, sizes), config, sizes)


@FEW
@given(drawn=startup_settings(encoder_decoder=True, dcp=False))
def test_0_25_encoder_decoder_rows_cover_every_dummy(drawn: tuple[RunnerConfig, tuple[int, ...]]) -> None:
    """0.25.0 sizes an encoder-decoder row from max(M, E, S) with E = B: every dummy length fits."""
    config, sizes = drawn
    assert_startup_holds(_verdict("0.25.0", config, sizes), config, sizes)


def test_capture_under_dcp_meets_the_open_cross_finding() -> None:
    """C = 2 halves the cross row (cdiv(L, bs * C), docs/spec.md) but capture hands every request S = 129
    encoder keys, read by position: column 8 of an 8-column row (the DCP finding, met at start-up)."""
    config = RunnerConfig(
        1, 1, (KVCacheGroup("full", 16), KVCacheGroup("cross", 16)), max_source_positions=129, dcp_size=2,
        max_num_reqs=1,
    )  # fmt: skip
    for version in ("0.25.0", "0.34.0"):
        lines = [b.line() for b in _verdict(version, config, ()).breaches if b.judge == "column"]
        assert "warm-up 1: request 0 reads column 8 of group 1; its row has 8 (columns 0..7)" in lines


@pytest.mark.parametrize(
    ("version", "config", "breach"),
    [
        # 0.24.0's pre-fix rows hold max(M, S) = 2048 tokens; B = 8192 over two sequences is 4096 each.
        ("0.24.0", RunnerConfig(2048, 8192, ENC_DEC_16, max_num_reqs=2),
         "warm-up 8192: request 0 hands group 0 4096 tokens; its row holds 2048"),
        # 0.25.0 gives the last dummy request the remainder: 2047, 2047, 2049 against a 2048-token row.
        ("0.25.0", RunnerConfig(2048, 6143, FULL_16, max_num_reqs=3, is_encoder_decoder=False),
         "warm-up 6143: request 2 hands group 0 2049 tokens; its row holds 2048"),
        # 0.34.0 spreads the remainder, but B > N * M is a warning only: 4097 tokens over one sequence.
        ("0.34.0", RunnerConfig(2048, 4097, FULL_16, max_num_reqs=1, is_encoder_decoder=False),
         "warm-up 4097: request 0 hands group 0 4097 tokens; its row holds 2048"),
    ],
)  # fmt: skip
def test_releases_whose_dummy_requests_outgrow_their_rows(
    version: str, config: RunnerConfig, breach: str
) -> None:
    """Each named release has a valid setting whose warm-up batch reads past a row; the failure names the
    release's make_dummy line and replays with ``check --startup``."""
    verdict = _verdict(version, config, ())
    assert breach in [b.line() for b in verdict.breaches]
    with pytest.raises(AssertionError) as failed:
        assert_startup_holds(verdict, config, ())
    text = str(failed.value)
    assert "vllm/v1/worker/gpu/input_batch.py:" in text and "--startup none" in text


# Meta-tests: a tree broken by one token, or writing a slot, fails the property ------------------------------

ONE_PAST = "        input_buffers.seq_lens[num_reqs - 1] += 1  # broken: one token past\n"


def _one_past(version: str) -> str:
    text = (FIXTURES / version / "input_batch.py").read_text()
    anchor = "        seq_lens = input_buffers.seq_lens[:num_reqs]\n"
    assert text.count(anchor) == 1
    return text.replace(anchor, ONE_PAST + anchor)


def test_a_tree_one_token_past_its_row_fails_the_property() -> None:
    broken = _run("0.34.0", BATCH_FILE=_one_past("0.34.0"))
    config, sizes = find(
        startup_settings(within_warning=True),
        lambda d: not su.judge(broken, d[0], d[1], _widths("0.34.0", d[0])).holds,
        settings=settings(max_examples=300, deadline=None, database=None),
    )
    with pytest.raises(AssertionError, match="read past their rows"):
        assert_startup_holds(su.judge(broken, config, sizes, _widths("0.34.0", config)), config, sizes)


def test_a_tree_writing_a_dummy_slot_fails_the_slot_judge() -> None:
    text = (FIXTURES / "0.25.0" / "block_table.py").read_text()
    broken = _run(
        "0.25.0",
        TABLE_FILE=text.replace("self.slot_mappings.fill_(PAD_SLOT_ID)", "self.slot_mappings.fill_(0)"),
    )
    config = RunnerConfig(2048, 2048, (KVCacheGroup("full", 16), KVCacheGroup("cross", 16)), max_num_reqs=1)
    verdict = su.judge(broken, config, (), _widths("0.25.0", config))
    assert {b.judge for b in verdict.breaches} == {"slot"}


def test_a_tree_capturing_one_encoder_key_past_its_row_fails() -> None:
    """0.25.0 with M = B = E = 2048 (no S): the cross row is exactly 2048 tokens, capture hands 2048 keys;
    a copy whose max_encoder_len is one more fails the length and column judges on the cross group."""
    config = RunnerConfig(2048, 2048, ENC_DEC_16, max_num_reqs=1)
    assert _verdict("0.25.0", config, ()).holds
    text = (FIXTURES / "0.25.0" / "encoder_decoder.py").read_text()
    own = "            self.max_model_len,\n        )\n"
    assert text.count(own) == 1
    broken = _run(
        "0.25.0", ENC_DEC_FILE=text.replace(own, "            self.max_model_len,\n        ) + 1\n")
    )
    verdict = su.judge(broken, config, (), _widths("0.25.0", config))
    assert {(b.judge, b.group) for b in verdict.breaches} == {("length", 1), ("column", 1)}
    assert verdict.encoder_len == 2049


def test_a_stand_in_the_code_reaches_is_not_run() -> None:
    """A release whose _dummy_run reaches a name with no stand-in stops naming it (a "not run")."""
    line = "        num_reqs = min(num_tokens, self.max_num_reqs)\n"
    text = (FIXTURES / "0.25.0" / "model_runner.py").read_text()
    runner = text.replace(line, line + "        current_platform.seed(0)\n", 1)

    with pytest.raises(StandInReached, match="current_platform"):
        _run("0.25.0", RUNNER_FILE=runner).scheduled(su.Settings(2048, 2048, 1, ()), 2048)


# Through the worker and ``check``: the intact tree holds, the tree one token past fails ---------------


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("startup")
    return {
        "intact": build_tree(root / "intact", "0.25.0"),
        "broken": build_tree(
            root / "broken", "0.25.0", startup_sources={"input_batch.py": _one_past("0.25.0")}
        ),
    }


CONFIG_2048 = '{"groups":[{"block_size":16,"kind":"full"},{"block_size":16,"kind":"cross"}],' \
    '"max_model_len":2048,"max_num_batched_tokens":2048,"max_num_reqs":1}'  # fmt: skip


def _check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["check", "--config", CONFIG_2048, *argv])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow  # two workers start (the intact and the broken tree), about 10 s each on a busy machine
def test_check_replays_the_start_up_batches(
    trees: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _check(capsys, "--engine", f"vllm@{trees['intact']}", "--startup", "none")
    assert code == 0, out + err
    assert "OK " in out and "warm-up 2048: seq_lens [2048]" in out
    assert "encoder keys:   2048 per request" in out and "encoder_decoder.py:58" in out
    code, out, err = _check(capsys, "--engine", f"vllm@{trees['broken']}", "--startup", "none")
    assert code == 1, out + err
    assert "FAIL  warm-up 2048: request 0 hands group 0 2049 tokens; its row holds 2048" in out
    assert "input_batch.py:123" in out


def test_check_startup_refusals(trees: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    engine = ("--engine", f"vllm@{trees['intact']}")
    code, _, err = _check(capsys, *engine, "--startup", "none", "--encoder-len", "5")
    assert code == 2 and "--startup and --encoder-len" in err
    code, _, err = _check(capsys, *engine, "--startup", "4096")
    assert code == 2 and "--startup" in err and "max_num_batched_tokens" in err
    code, _, err = _check(capsys, "--startup", "none")
    assert code == 2 and "--startup needs --engine vllm" in err


# verify's start-up row and the encoder finding, on the recorded releases ----------------------------


class _Recorded:
    """A policy answering ``startup`` as the worker does, from a recorded release run in this process."""

    def __init__(self, version: str) -> None:
        self.version = version

    def startup(self, config: RunnerConfig, sizes: tuple[int, ...]) -> dict[str, object]:
        return su.verdict_dict(_verdict(self.version, config, tuple(sizes)))


@pytest.mark.parametrize(("version", "b", "line"), [("0.25.0", 6143, 123), ("0.34.0", 6145, 165)])
def test_verify_row_names_the_release_line_and_replays(version: str, b: int, line: int) -> None:
    from crossattn_sizing.findings.startup import startup_row

    row = startup_row(_Recorded(version), f"vllm=={version}")
    assert row.outcome == "fails" and row.examples >= 2
    assert f"vllm/v1/worker/gpu/input_batch.py:{line}" in row.diagnosis
    assert f'"max_num_batched_tokens":{b}' in row.reproduce and row.reproduce.startswith(
        f"crossattn-sizing check --engine vllm=={version} --config"
    )
    assert ("logs a warning" in row.diagnosis) == (version == "0.34.0")


def test_encoder_reservation_of_nemotron_parse_is_short_by_81_blocks() -> None:
    """0.25.0 warms up and captures with max_model_len = 2048 keys (no max_source_positions): 128 blocks of
    16 against the 209 a 3329-token page uses; the memory profile (cdiv(E, bs) = 256) is not short."""
    from crossattn_sizing.findings.startup import encoder_reservation_finding

    found = encoder_reservation_finding(_Recorded("0.25.0"), "vllm==0.25.0")
    assert found is not None
    assert "short by 81 blocks (1281 keys)" in found.detail and "encoder_decoder.py:58" in found.detail
    assert "--startup none" in found.detail


def test_the_graph_capture_model_is_each_releases_own_rule() -> None:
    """findings/graph_capture.py models max_encoder_len (it may not import an engine); here its rule is
    checked against each recorded release's own expression, S present and absent."""
    from crossattn_sizing.findings.graph_capture import KNOWN_SHAPES, captured_key_length

    for version, run in RUNS.items():
        for shape in KNOWN_SHAPES:
            own = run.encoder_length(su.settings_of(shape.config, ()))
            assert own == captured_key_length(shape.config), (version, shape.name)


@pytest.mark.slow  # the release's worker starts (about 10 s on a busy machine)
def test_audit_has_start_up_columns(
    trees: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``audit --runner startup``: V2's start-up batches executed (0.25.0 fails, the replay line beside it);
    V1's column absent from the recorded tree, which holds no gpu_model_runner.py (a wheel's says not run)."""
    import json

    out = tmp_path / "audit.json"
    try:
        code = main(
            ["audit", "--engine", f"vllm@{trees['intact']}", "--runner", "startup", "--json", str(out)]
        )
    except SystemExit as exc:
        code = int(exc.code or 0)
    printed = capsys.readouterr().out
    assert code == 1, printed
    cells = {r["runner"]: r for r in json.loads(out.read_text())["results"]}
    assert cells["startup-v2"]["verdict"] == "fails" and cells["startup-v2"]["path"] == "executed"
    assert "input_batch.py:123" in cells["startup-v2"]["reason"]
    assert "replay: crossattn-sizing check --engine vllm@" in cells["startup-v2"]["reason"]
    assert cells["startup-v1"]["verdict"] == "absent"
    assert "Start-up batches V2" in printed


def test_v1_start_up_column_is_not_run_with_its_reason() -> None:
    from crossattn_sizing.audit.startup import startup_verdicts

    v2, v1 = startup_verdicts("0.25.0", None, None, "the wheel is not cached", has_v1=True)
    assert (v2.outcome, v1.outcome) == ("not run", "not run")
    assert "the wheel is not cached" in (v2.reason or "") and "_dummy_run is not executed" in (
        v1.reason or ""
    )
