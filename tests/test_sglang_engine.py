"""SGLang 0.5.23's own code on the recorded tree (tests/fixtures/sglang/0.5.23; no download).

What runs is the release's (docs/engine.md, "SGLang"): its row width sizing and
``ReqToTokenPool``, ``prepare_encoder_info_extend``, ``alloc_for_decode_default``
and ``FlashAttentionBackend``'s decode metadata on both paths. The issue's
batch reads past its row; a copy bounded per request holds; bad trees are one
line; a piece without a stand-in is "not run".
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.commands.cli import main
from crossattn_sizing.engine.sglang import install as sglang_install
from crossattn_sizing.engine.sglang.client import SglangReads
from tests.sglang_tree import FA3, FIXTURE, SPEC, bounded_copy, copy_tree

pytest.importorskip("transformers", reason="the 'hf' extra is not installed")
os.environ.setdefault("TRITON_INTERPRET", "1")

ISSUE = [(6404, 20, 21), (0, 3000, 3001)]
NEIGHBOUR = [(6404, 20, 21), (0, 1000, 1001)]


@pytest.fixture(scope="module")
def release():  # type: ignore[no-untyped-def]
    from crossattn_sizing.engine.sglang.run import SglangRelease

    return SglangRelease.load(FIXTURE)


def test_width_is_context_len_plus_four(release) -> None:  # type: ignore[no-untyped-def]
    assert 8192 + release.extra_context_len() == 8196


@pytest.mark.parametrize("path", ["eager", "replay"])
def test_issue_batch_reads_past_its_row(release, path: str) -> None:  # type: ignore[no-untyped-def]
    from crossattn_sizing.engine.sglang.run import run_metadata

    verdict = run_metadata(release, 8192, ISSUE, path)
    got = (verdict["verdict"], verdict["row"], verdict["column"], verdict["width"])
    assert got == ("fails", 1, 8196, 8196)
    assert run_metadata(release, 8192, NEIGHBOUR, path) == {"verdict": "holds"}


def test_without_the_guard_torch_s_index_error_is_not_a_verdict(release, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The guard is what makes the read past the row a judged failure: without it torch's own IndexError
    (the issue's) is only something raised, which the verdict boundary reports as not run."""
    from crossattn_sizing.engine.sglang import run as sglang_run

    monkeypatch.setattr(sglang_run.GuardedTable, "_check", lambda self, key, attention: None)
    verdict = sglang_run.run_metadata(release, 8192, ISSUE, "eager")
    # Unguarded, torch's own IndexError is all that is left: the harness cannot judge it (not run), and
    # names the release's line that raised it.
    assert verdict["verdict"] == "not run"
    assert "IndexError: index 8196 is out of bounds" in verdict["reason"]
    assert "flashattention_backend.py:" in verdict["reason"]
    assert verdict["where"].startswith(f"{FA3}:")


def test_decode_rule_and_extend_are_the_release_s(release) -> None:  # type: ignore[no-untyped-def]
    from crossattn_sizing.engine.sglang.run import prepare_batch

    prepared = prepare_batch(release, 64, [(5, 3, 6), (0, 7, 9)])
    assert prepared.encoder_lens.tolist() == [5, 0]
    assert prepared.seq_lens.tolist() == [6, 9]
    row = prepared.table.tensor[int(prepared.req_pool_indices[0])]
    assert row[: 5 + 6].tolist() == prepared.ids[0].tolist()  # [E | d], the last written by the decode rule
    assert row[5 + 6 :].eq(0).all()


def test_worker_bounded_copy_holds_and_original_fails(tmp_path: Path) -> None:
    bounded = bounded_copy(tmp_path / "bounded")
    assert SglangReads(f"sglang@{bounded}").first_problem(8192, ISSUE) is None
    kind, line = SglangReads(SPEC).first_problem(8192, ISSUE)
    assert kind == "fails" and "column 8196" in line


def test_a_missing_stand_in_is_not_run(tmp_path: Path) -> None:
    old = "        if forward_batch.encoder_lens is not None:\n"
    new = "        if get_exec().x or forward_batch.encoder_lens is not None:\n"
    tree = copy_tree(tmp_path / "t", {FA3: (old, new)})
    kind, line = SglangReads(f"sglang@{tree}").first_problem(8192, NEIGHBOUR)
    assert kind == "not run" and "no CPU stand-in for sglang.srt.runtime_context.get_exec" in line


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ((FA3, ("class FlashAttentionBackend(AttentionBackend):\n",
                "class FlashAttentionBackend(AttentionBackend)\n")),
         "the tree has a syntax error"),
    ],
)
def test_bad_trees_are_one_line(tmp_path: Path, change, says: str, capsys) -> None:  # type: ignore[no-untyped-def]
    tree = copy_tree(tmp_path / "t", {change[0]: change[1]})
    code = main(["check", "--engine", f"sglang@{tree}", "--context-len", "64", "--kv-capacity", "64",
                 "--requests", "5:3:6"])
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--engine", "sglang@/nonexistent"], "has no sglang package"),
        (["--engine", "sglang==abc"], "not a release version"),
        (["--engine", "vllm==0.25.0"], "--context-len 64: does not apply with --engine vllm==0.25.0"),
        (["--engine", "nope==1"], "--engine nope==1: names no engine the harness runs"),
        (["--engine", SPEC, "--policy", "mrv2"], f"--policy mrv2: does not apply with --engine {SPEC}"),
        (["--engine", SPEC, "--requests", "5:3"], "each request is e:prompt:d"),
        (["--engine", SPEC, "--requests", "5:3:6:8"], "a cached prefix is 0, or covers the encoder"),
        (["--engine", SPEC, "--requests", "60:3:4"], "not admitted by SGLang"),
        (["--engine", SPEC, "--requests", "5:3:3"], "d must be prompt + 1"),
        (["--engine", SPEC, "--context-len", "x"], "--context-len='x': must be an integer"),
    ],
)
def test_check_bad_input(args: list[str], says: str, capsys) -> None:  # type: ignore[no-untyped-def]
    base = {"--context-len": "64", "--kv-capacity": "64", "--requests": "5:3:6"}
    for i in range(0, len(args), 2):
        base.pop(args[i], None)
    extra = [x for kv in base.items() for x in kv]
    assert main(["check", *args, *extra]) == 2
    assert says in capsys.readouterr().err


def test_check_and_reproduce_cli() -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "crossattn_sizing"]
    out = subprocess.run([*cmd, "reproduce", "mllama-mixed-batch", "--engine", SPEC], capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 1, out.stderr
    assert "= 6404 encoder tokens" in out.stdout
    assert ("FAIL  eager: self-attention gather read pool row 1 (request 0's req_to_token row) column 8196, "
            "past the row (width 8196") in out.stdout
    assert "FAIL  replay:" in out.stdout
    replay = out.stdout.split("reproduce: ")[1].strip()
    assert replay.startswith("crossattn-sizing check --engine")
    again = subprocess.run([*cmd, *replay.split()[1:]], capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 1 and "column 8196" in again.stdout


def _fake_wheel(dest: Path, tag: str) -> Path:
    dest.mkdir(parents=True)
    wheel = dest / f"sglang-9.9.9-{tag}-{tag}-manylinux_2_34_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path in FIXTURE.rglob("*.py"):
            archive.write(path, str(path.relative_to(FIXTURE)))
    return wheel


def test_release_from_a_cached_wheel_for_another_python_says_so(tmp_path: Path) -> None:
    _fake_wheel(tmp_path / "wheels", "cp399")
    root, note = sglang_install.resolve_sglang("sglang==9.9.9", offline=True, cache=tmp_path)
    assert (root / FA3).is_file()
    assert note.startswith("sglang==9.9.9 ships wheels for Python 3.99 only, not ")
    assert "unpacked anyway" in note


def test_release_for_this_python_has_no_note(tmp_path: Path) -> None:
    _fake_wheel(tmp_path / "wheels", f"cp{sys.version_info.major}{sys.version_info.minor}")
    assert sglang_install.resolve_sglang("sglang==9.9.9", offline=True, cache=tmp_path)[1] == ""


def test_offline_without_the_wheel_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ReleaseUnavailable, match=r"sglang==9\.9\.9 is not in the wheel cache .*OFFLINE=1"):
        sglang_install.resolve_sglang("sglang==9.9.9", offline=True, cache=tmp_path)


ALLOCATION = "sglang/srt/mem_cache/allocation.py"
HANG = ("    batch.maybe_evict_swa()\n", "    import time; time.sleep(600)\n    batch.maybe_evict_swa()\n")


@pytest.mark.parametrize(
    ("option", "env", "says"),
    [(["--call-timeout", "2"], "30", "timed out after 2 s"),  # the option over the variable
     ([], "3", "timed out after 3 s")],  # the variable without the option
)
def test_check_call_timeout_bounds_each_call_into_the_tree(  # type: ignore[no-untyped-def]
    tmp_path: Path, monkeypatch, capsys, option: list[str], env: str, says: str
) -> None:
    """``--call-timeout`` applies to SGLang's worker (option > CROSSATTN_CALL_TIMEOUT > default): a decode
    rule that hangs fails the batch in one line after that many seconds."""
    monkeypatch.setenv("CROSSATTN_CALL_TIMEOUT", env)
    tree = copy_tree(tmp_path / "t", {ALLOCATION: HANG})
    code = main(["check", "--engine", f"sglang@{tree}", *option, "--context-len", "64", "--kv-capacity", "64",
                 "--requests", "5:3:6"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1 and "FAIL  write: the tree's code did not return" in out and says in out, out
    assert "Traceback" not in out


def test_a_release_that_asserts_one_request_per_batch_refuses_the_whole_batch(tmp_path: Path) -> None:
    """0.5.12 and older assert one request per batch on the eager path: that assert is the release refusing
    the batch (not a verdict, and not the harness breaking). The eager path is then "not run" saying so,
    never a hold from requests judged one by one; the replay path is judged on the whole batch. (A stand-in
    for 0.5.12.post1: the recorded 0.5.23 tree with the assert put back; that wheel is not recorded.)"""
    from crossattn_sizing.engine.sglang.client import sglang_worker

    doc = '        """Initialize forward metadata hence all layers in the forward pass can reuse it."""\n'
    first = doc + "        metadata = FlashAttentionMetadata()\n"
    refuse = "        assert forward_batch.batch_size == 1, 'Only encoder size 1 is supported for now'\n"
    asserts = doc + refuse + "        metadata = FlashAttentionMetadata()\n"
    spec = f"sglang@{copy_tree(tmp_path / 't', {FA3: (first, asserts)})}"
    answer = sglang_worker(spec).request("read", context_len=64, batch=[[5, 3, 6], [0, 7, 9]])
    assert answer["refused"] is True and "the release asserts: Only encoder size 1" in answer["why"]
    eager, replay = answer["paths"]["eager"], answer["paths"]["replay"]
    assert eager["verdict"] == "not run" and eager["refused"] is True
    assert eager["reason"].startswith("the release refuses a batch of 2 requests on the eager path")
    assert replay == {"verdict": "holds"}  # the replay path, judged on the whole batch
    # A replay read past the row is reported although the eager path refused the batch.
    over = sglang_worker(spec).request("read", context_len=64, batch=[[40, 3, 4], [0, 20, 30]])
    assert over["refused"] is True and over["paths"]["replay"]["verdict"] == "fails"
    alone = sglang_worker(spec).request("metadata", context_len=64, batch=[[5, 3, 6]], path="eager")
    assert alone == {"verdict": "holds"}
