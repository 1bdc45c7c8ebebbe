"""TensorRT-LLM's own cross-pool sizing, executed from the recorded trees (tests/fixtures/tensorrt_llm/).

The recorded commit sizes Whisper-large-v3's cross pool at 1024 (max_input_len)
for 1500 encoder frames; the tree with the fix's shape gives 1500. The function
runs in its worker, under its file's name and line numbers; what it cannot be
asked about is "not run" naming why, never a verdict.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crossattn_sizing.base.processes import alive
from crossattn_sizing.core.cross_pool import FAMILIES, CrossPoolCase, CrossPoolNotRun, whisper_large_v3_case
from crossattn_sizing.engine.tensorrt_llm.sizer import TrtllmCrossPool
from crossattn_sizing.engine.tensorrt_llm.source import QUALNAME, read_layout_source
from crossattn_sizing.findings.results import PropertyFailure
from crossattn_sizing.runs.cross_pool_verify import PROPERTY
from properties.cross_pool_capacity import encoder_tokens_fit_the_cross_pool
from tests.tensorrt_llm_tree import FIXED, RECORDED, changed_copy, spec, with_line

ROOT = Path(__file__).resolve().parents[1]
FALLBACK_LINE = "        max_seq_len = fallback_max_seq_len or self._max_seq_len\n"
DEFAULT_LINE = "        fallback_max_seq_len: Optional[int] = None\n"
RETURN_LINE = "        return num_layers, num_kv_heads, head_dim, max_seq_len\n"
BEFORE_DEF = "        return None\n\n    def _get_cross_kv_cache_layout(\n"
"""The helper's last line, the blank line 1893 and the sizing's ``def`` (a decorator fits on 1893)."""


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``crossattn-sizing ARGS`` in a fresh process, from the repository root."""
    return subprocess.run([sys.executable, "-m", "crossattn_sizing", *args], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, **(env or {})}, timeout=300, check=False)  # fmt: skip


def test_the_recorded_function_keeps_the_commits_line_numbers() -> None:
    source = read_layout_source(RECORDED)
    assert source.function_line == 1894 and source.signature_problem is None
    assert source.path.read_text().startswith("# Copyright (c) 2026, NVIDIA CORPORATION.")


def test_recorded_tree_sizes_whisper_large_v3_at_max_input_len() -> None:
    assert TrtllmCrossPool(spec(RECORDED)).layout(whisper_large_v3_case()) == (32, 20, 64, 1024)


def test_fixed_tree_sizes_it_at_the_encoder_limit() -> None:
    assert TrtllmCrossPool(spec(FIXED)).layout(whisper_large_v3_case()) == (32, 20, 64, 1500)


def test_recorded_tree_reads_the_six_keys_and_min() -> None:
    bart = FAMILIES["bart-large"]
    case = CrossPoolCase("bart-large", bart.config(), 900, 4096, 2048)
    assert TrtllmCrossPool(spec(RECORDED)).pool_len(case) == 1024  # min(2048, max_position_embeddings)
    t5 = FAMILIES["t5-small"]
    case = CrossPoolCase("t5-small", t5.config(()), 900, 4096, None)
    assert TrtllmCrossPool(spec(RECORDED)).pool_len(case) == 4096  # no limit, no max_input_len: max_seq_len


def test_property_fails_on_the_recorded_tree_with_whisper_large_v3() -> None:
    with pytest.raises(PropertyFailure) as info:
        encoder_tokens_fit_the_cross_pool(sizer=TrtllmCrossPool(spec(RECORDED)))
    text = info.value.diagnosis
    assert "model family:   whisper-large-v3 (config limit keys: max_source_positions=1500)" in text
    assert "encoder tokens: 1500 (audio frames, fixed)" in text
    assert "max_input_len 1024" in text and "cross pool:     1024 tokens" in text
    assert info.value.reproduce.startswith(f"crossattn-sizing check --engine {spec(RECORDED)} --config ")


def test_property_holds_on_the_fixed_tree() -> None:
    encoder_tokens_fit_the_cross_pool(sizer=TrtllmCrossPool(spec(FIXED)))


def test_the_check_line_replays_the_failure() -> None:
    with pytest.raises(PropertyFailure) as info:
        encoder_tokens_fit_the_cross_pool(sizer=TrtllmCrossPool(spec(RECORDED)))
    words = shlex.split(info.value.reproduce)
    assert words[:2] == ["crossattn-sizing", "check"]
    done = cli(*words[1:])
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "FAIL  the request's encoder tokens need 1500 tokens of the cross pool, which holds 1024"
        in done.stdout
    )
    assert f"reproduce: {info.value.reproduce}" in done.stdout  # the same line again


def test_verify_fails_on_the_recorded_tree_and_holds_on_the_fixed_one() -> None:
    done = cli("verify", "--engine", spec(RECORDED))
    assert done.returncode == 1, done.stdout + done.stderr
    assert verdict_row(done.stdout) == "fails"
    assert "model family:   whisper-large-v3" in done.stdout
    assert "reproduce: crossattn-sizing check" in done.stdout
    check = next(line for line in done.stdout.splitlines() if "reproduce: crossattn-sizing" in line)
    replay = cli(*shlex.split(check.split("reproduce: ", 1)[1])[1:])
    assert replay.returncode == 1 and "which holds 1024" in replay.stdout
    done = cli("verify", "--engine", spec(FIXED), "--max-examples", "100")
    assert done.returncode == 0, done.stdout + done.stderr
    assert verdict_row(done.stdout) == "holds"
    assert "start-up batches not run: " in done.stdout  # a documented absence, said; exit 0 all the same


def test_reproduce_whisper_on_both_trees() -> None:
    done = cli("reproduce", "whisper", "--engine", spec(RECORDED))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "encoder tokens: 1500" in done.stdout and "cross pool:     1024 tokens" in done.stdout
    done = cli("reproduce", "whisper", "--engine", spec(FIXED))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK    1500 encoder tokens fit the cross pool of 1500 tokens" in done.stdout


def test_a_changed_signature_is_not_run(tmp_path: Path) -> None:
    tree = changed_copy(
        RECORDED,
        tmp_path / "sig",
        "        fallback_max_seq_len: Optional[int] = None\n",
        "        fallback_max_seq_len: Optional[int] = None, *, encoder_len: int\n",
    )
    with pytest.raises(
        CrossPoolNotRun, match=r"_util.py:1894: .* is not \(self, fallback_max_seq_len=None\)"
    ):
        TrtllmCrossPool(spec(tree)).pool_len(whisper_large_v3_case())
    with pytest.raises(pytest.skip.Exception, match="not run"):
        encoder_tokens_fit_the_cross_pool(sizer=TrtllmCrossPool(spec(tree)))
    done = cli("reproduce", "whisper", "--engine", spec(tree))
    assert done.returncode == 3 and "NOT RUN" in done.stdout, done.stdout + done.stderr
    done = cli("verify", "--engine", spec(tree))
    assert done.returncode == 3 and verdict_row(done.stdout) == "not run", done.stdout + done.stderr


def test_an_imported_name_used_is_not_run_naming_it(tmp_path: Path) -> None:
    tree = changed_copy(
        RECORDED,
        tmp_path / "torch",
        FALLBACK_LINE,
        "        max_seq_len = torch.tensor(fallback_max_seq_len or self._max_seq_len)\n",
    )
    with pytest.raises(CrossPoolNotRun) as info:
        TrtllmCrossPool(spec(tree)).pool_len(whisper_large_v3_case())
    assert f"_util.py:1942: {QUALNAME} used torch.tensor, which the harness does not provide" in str(
        info.value
    )
    assert "StandIn" not in str(info.value)  # the harness's class names are not words for users


def test_a_sizing_that_never_returns_is_not_run_after_the_deadline(tmp_path: Path) -> None:
    tree = changed_copy(RECORDED, tmp_path / "hang", FALLBACK_LINE, "        while True: pass\n")
    done = cli("reproduce", "whisper", "--engine", spec(tree), env={"CROSSATTN_CALL_TIMEOUT": "2"})
    assert done.returncode == 3, done.stdout + done.stderr
    assert "NOT RUN" in done.stdout and "timed out after 2 s" in done.stdout


def test_the_kept_worker_takes_each_callers_deadline() -> None:
    """One worker per tree (engine/client.kept_worker, as SGLang's): a later ``--call-timeout`` bounds its
    calls too, instead of the one it was started with."""
    from crossattn_sizing.engine.tensorrt_llm.sizer import tensorrt_llm_worker

    first = tensorrt_llm_worker(spec(RECORDED), 170.0)
    again = tensorrt_llm_worker(f" {spec(RECORDED)} ", 190.0)
    assert again is first and first.deadline == 190.0
    assert tensorrt_llm_worker(spec(RECORDED)).deadline == 190.0  # none given: the worker keeps its own
    assert TrtllmCrossPool(spec(RECORDED)).pool_len(whisper_large_v3_case()) == 1024


# --- issue 45: every harness error is "not run" in one line; the tree's code is supervised ---


def verdict_row(stdout: str) -> str:
    """The property's verdict in verify's table (the cell after its name), or "" when no row shows it."""
    found = re.search(rf"{re.escape(PROPERTY)}\s*│\s*(not run|\w+)", stdout)
    return found.group(1) if found else ""


def one_line_not_run(done: subprocess.CompletedProcess[str]) -> str:
    """The run said "not run" (exit 3), with no traceback; the one line saying why (check's and
    reproduce's last line; verify's reason under its table, after ``not run:``)."""
    shown = done.stdout + done.stderr
    assert done.returncode == 3, shown
    assert "Traceback" not in shown and "Error:" not in done.stderr, shown
    if "NOT RUN" in done.stdout:
        return done.stdout.strip().splitlines()[-1].strip()
    assert verdict_row(done.stdout) == "not run", shown
    return next(line for line in done.stdout.splitlines() if f"{PROPERTY} not run: " in line).split(
        f"{PROPERTY} not run: ", 1
    )[1]


@pytest.mark.parametrize(
    ("old", "new", "used", "line"),
    [
        (
            BEFORE_DEF,
            "        return None\n    @trtllm.nvtx_range('cross kv')\n    def _get_cross_kv_cache_layout(\n",
            "tensorrt_llm.bindings.executor.nvtx_range",
            1893,
        ),
        (DEFAULT_LINE, "        fallback_max_seq_len: Optional[int] = copy.copy(None)\n", "copy.copy", 1896),
    ],
    ids=["decorator", "default-value"],
)
def test_a_stand_in_reached_while_the_class_is_built_is_not_run_naming_it(
    tmp_path: Path, old: str, new: str, used: str, line: int
) -> None:
    """Building the class runs the tree's decorators and default values: a stand-in they use is "not run"
    naming it and the line (issue 45 used ``@torch.no_grad()``; these are other names and forms)."""
    tree = changed_copy(FIXED, tmp_path / "built", old, new)
    with pytest.raises(CrossPoolNotRun) as info:
        TrtllmCrossPool(spec(tree)).pool_len(whisper_large_v3_case())
    text = str(info.value)
    assert f"_util.py:{line}: building class KvCacheCreator" in text and f"used {used}, which the" in text
    assert "StandIn" not in text and "crossattn_" not in text
    said = one_line_not_run(cli("reproduce", "whisper", "--engine", spec(tree)))
    assert said.startswith("NOT RUN ") and f"_util.py:{line}: " in said and used in said
    said = one_line_not_run(cli("verify", "--engine", spec(tree), "--max-examples", "5"))
    assert f"_util.py:{line}: " in said and used in said


def test_a_default_value_that_ends_the_worker_is_not_run(tmp_path: Path) -> None:
    """The tree's code ending its worker before it is ready (here while the class is built) is the
    tree's doing: "not run", as a crash during a call is, never bad input."""
    tree = changed_copy(
        FIXED, tmp_path / "exits", DEFAULT_LINE,
        "        fallback_max_seq_len: Optional[int] = __import__('os')._exit(4)\n",
    )  # fmt: skip
    said = one_line_not_run(cli("reproduce", "whisper", "--engine", spec(tree)))
    assert said.startswith("NOT RUN ") and "exit status 4" in said


def test_a_file_the_harness_cannot_parse_is_not_run(tmp_path: Path) -> None:
    """An expression chained past the parser's recursion limit, outside the sizing (issue 45: a long
    sum; here an attribute chain): the harness cannot read the file, which says nothing of the tree."""
    tree = with_line(FIXED, tmp_path / "chain", 300, "CHAIN = x" + ".a" * 30000)  # before the class
    config = json.dumps({**whisper_large_v3_case().to_dict(), "max_input_len": None, "tokens_per_block": 64})
    said = one_line_not_run(cli("check", "--engine", spec(tree), "--config", config, "--encoder-len", "1500"))
    assert said.startswith("NOT RUN ") and "the harness's parser gave up on the file (RecursionError" in said
    said = one_line_not_run(cli("verify", "--engine", spec(tree), "--max-examples", "3"))
    assert "the harness's parser gave up on the file (RecursionError" in said


def test_a_negative_pool_is_judged_as_holding_no_token(tmp_path: Path) -> None:
    """A negative length is the tree's answer, and a pool that holds nothing: "fails", never the judge's
    ValueError (issue 45 returned one outright; here it comes of a subtraction, for some cases only)."""
    tree = changed_copy(
        FIXED, tmp_path / "negative", RETURN_LINE,
        "        return num_layers, num_kv_heads, head_dim, max_seq_len - 2000\n",
    )  # fmt: skip
    done = cli("reproduce", "whisper", "--engine", spec(tree))  # 1500 - 2000
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert (
        "cross pool:     -500 tokens (0 blocks) (a negative length: the pool holds no token)" in done.stdout
    )
    assert "need 1500 tokens of the cross pool, which holds 0" in done.stdout
    done = cli("verify", "--engine", spec(tree), "--max-examples", "20")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert verdict_row(done.stdout) == "fails"


@pytest.mark.parametrize(
    ("argv", "env"),
    [(("--hypothesis-profile", "reuse"), {}), (("--max-examples", "7"), {"CROSSATTN_PROFILE": "replay"})],
    ids=["reuse-option", "replay-variable"],
)
def test_a_profile_that_draws_no_example_is_not_run(argv: tuple[str, ...], env: dict[str, str]) -> None:
    """Hypothesis told to generate nothing (issue 45: ``replay``) judged nothing: "not run", not "holds"."""
    said = one_line_not_run(cli("verify", "--engine", spec(FIXED), *argv, env=env))
    assert "no example was drawn" in said
    assert "holds" not in said


def test_a_file_with_a_null_byte_names_no_line_it_lacks(tmp_path: Path) -> None:
    """Python's parser gives a null byte no line: the error names the file alone, not ``_util.py:None:``."""
    tree = with_line(FIXED, tmp_path / "nul", 1200, "# \0")
    done = cli("reproduce", "whisper", "--engine", spec(tree))
    assert done.returncode == 2 and "the file does not parse" in done.stderr, done.stdout + done.stderr
    assert ":None" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended, waiting a little for a kill already sent to land; ended here if not."""
    for _ in range(100):
        if not alive(pid):
            return True
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)  # the test leaves nothing behind either way
    return False


@pytest.mark.parametrize(
    ("old", "new", "command"),
    [
        (
            FALLBACK_LINE,
            "        max_seq_len = (open({pids!r}, 'w').write(str(__import__('subprocess').Popen(['sleep', "
            "'300'], start_new_session=True).pid)) and 0) or fallback_max_seq_len or self._max_seq_len\n",
            ("reproduce", "whisper"),
        ),
        (
            DEFAULT_LINE,
            "        fallback_max_seq_len: Optional[int] = __import__('subprocess').call(['sh', '-c', "
            "'setsid sleep 300 & echo $! > {pids}']) and None\n",
            ("verify", "--max-examples", "5"),
        ),
    ],
    ids=["setsid-child-of-the-sizing", "orphaned-setsid-grandchild-of-the-class"],
)
def test_nothing_the_trees_code_starts_outlives_the_run(
    tmp_path: Path, old: str, new: str, command: tuple[str, ...]
) -> None:
    """The worker is under the supervisor the user-code workers have: a process the tree's code starts in a
    session of its own (a child of the sizing, or an orphan of a shell run while the class is built) is
    ended with the run."""
    pids = tmp_path / "child.pid"
    tree = changed_copy(FIXED, tmp_path / "spawns", old, new.format(pids=str(pids)))
    done = cli(*command, "--engine", spec(tree))
    assert pids.is_file(), done.stdout + done.stderr  # the tree's code ran and started its child
    pid = int(pids.read_text().split()[0])
    assert _gone(pid), f"the tree's child {pid} outlived the run"
    assert done.returncode == 0, done.stdout + done.stderr  # the fixed tree holds, with or without its child
