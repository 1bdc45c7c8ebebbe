"""The judge never shares a process with the code under test (issue 27, parts 1 and 3).

Each hostile behaviour of tests/hostile_code.py gets the status and message it
should, and each new check has a meta-test: the same check stays quiet on
honest code, or (``--in-process``) the hostile code does reach a judge that
shares its process, so the isolated test could have failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

import crossattn_sizing.core.capacity as capacity
from crossattn_sizing.base.errors import PolicyCallError
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.core.policies import PROBE_CONFIG, checked_widths
from crossattn_sizing.core.slot_layout import SlotLayout
from crossattn_sizing.engine.client import CallTimeout
from crossattn_sizing.engine.isolated import InputChanged, IsolatedImpl
from crossattn_sizing.impl.step import AttentionStep, SlotStep, WriteStep
from crossattn_sizing.specs.resolve import Isolation, load_checked_policy, load_impl
from tests.processes import cli, run, running

HOSTILE = "tests.hostile_code"
NEMOTRON = json.dumps(
    {
        "max_model_len": 2048,
        "max_num_batched_tokens": 4096,
        "groups": [{"kind": "full", "block_size": 16}, {"kind": "cross", "block_size": 16}],
    }
)
SMALL_DOMAIN = (
    "--block-size",
    "1-8",
    "--max-model-len",
    "1-64:7",
    "--encoder-budget",
    "1-64:7",
    "--source-positions",
    "absent,0",
    "--no-progress",
)
MARGIN = 20.0
"""Seconds past a deadline a timed-out call may take to be reported (a fork and a kill, on a busy machine)."""


XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
"""This pytest-xdist worker's name ("" outside xdist): every process a test starts inherits it."""


def _this_worker(entry: Path) -> bool:
    """Whether the process ``entry`` was started under this pytest-xdist worker (always, outside xdist): the
    other worker may be running the same hostile module at the same time, and its workers are not ours."""
    if not XDIST_WORKER:
        return True
    try:
        environ = (entry / "environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"PYTEST_XDIST_WORKER={XDIST_WORKER}".encode() in environ


def workers_of(spec: str) -> list[int]:
    """Pids of live worker processes loading ``spec`` (none may outlive a test)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        loads = [part for part in cmdline if part.startswith((b"impl=", b"policy="))]
        ours = cmdline[0] == sys.executable.encode() and _this_worker(entry)  # not another run's
        if ours and state != "Z" and any(spec.encode() in part for part in loads):
            found.append(int(entry.name))
    return found


def gone(spec: str, within: float = 10.0) -> bool:
    """Whether every worker of ``spec`` has ended within ``within`` seconds (they watch their parent)."""
    ends = time.monotonic() + within
    while workers_of(spec) and time.monotonic() < ends:
        time.sleep(0.2)
    return not workers_of(spec)


VERIFY_DEFAULTS = {"--max-examples": "5", "--seed": "1", "--jobs": "1"}
"""verify's options for these runs where a test does not give its own (an option is given once)."""


def verify(*args: str, env: dict[str, str] | None = None, json_path: Path) -> tuple[int, str, dict]:
    defaults = [part for flag, value in VERIFY_DEFAULTS.items() if flag not in args for part in (flag, value)]
    done = run(
        cli("verify", "--policy", "mrv2", *defaults, "--json", str(json_path), *args),
        env=env,
    )
    data = json.loads(json_path.read_text()) if json_path.exists() else {}
    return done.returncode, done.stdout + done.stderr, data


def outcomes(data: dict) -> dict[str, str]:
    return {p["name"]: p["outcome"] for v in data["policies"] for p in v["properties"]}


# Implementations: death, crash, mutation, hangs, wrong answers, signals --------------------------
@pytest.mark.slow
def test_an_implementation_that_calls_os_exit_0_fails_verify(tmp_path: Path) -> None:
    spec = f"{HOSTILE}:ExitsInSlotMapping"
    status, out, data = verify(
        "--impl", spec, "-k", "test_slot_mapping_matches_reference", json_path=tmp_path / "v.json"
    )
    assert status == 1, out
    assert data["exit_status"] == 1
    assert set(outcomes(data).values()) == {"fails"}, out
    assert "worker died (exit status 0) while running slot_mapping" in out
    assert gone(spec)


@pytest.mark.slow
def test_a_segfault_in_attention_fails_that_property_and_verify_reports_the_rest(tmp_path: Path) -> None:
    spec = f"{HOSTILE}:SegfaultsInAttention"
    status, out, data = verify(
        "--impl",
        spec,
        "-k",
        "test_slot_mapping_matches_reference or test_cross_attention_matches_dense",
        json_path=tmp_path / "v.json",
    )
    assert status == 1, out
    seen = outcomes(data)
    assert seen["test_slot_mapping::test_slot_mapping_matches_reference"] == "holds", seen
    assert "fails" in {o for name, o in seen.items() if "cross_attention" in name}, seen
    assert "SIGSEGV" in out
    assert gone(spec)


@pytest.mark.parametrize(("spec", "changed"), [("ClearsSlots", "step.slots"), ("OverwritesOuts", "outs[0]")])
def test_a_kernel_that_changes_an_input_fails_naming_it(spec: str, changed: str) -> None:
    impl = IsolatedImpl(f"{HOSTILE}:{spec}", "cpu", 30.0)
    try:
        with pytest.raises(
            InputChanged, match=rf"changed its input {changed.replace('[', '.').replace(']', '.')}"
        ):
            call_write_and_merge(impl)
    finally:
        impl.close()


def test_an_honest_kernel_changes_nothing_and_gets_the_judges_buffers_filled() -> None:
    """Meta: the input check is quiet for a kernel that keeps to the interface, and outputs come back."""
    impl = IsolatedImpl(f"{HOSTILE}:Honest", "cpu", 30.0)
    try:
        key_cache, merged = call_write_and_merge(impl)
    finally:
        impl.close()
    assert torch.equal(key_cache[0, 0], torch.ones(2, 4))
    assert merged.shape == (3, 2, 4)


def call_write_and_merge(impl: IsolatedImpl) -> tuple[torch.Tensor, torch.Tensor]:
    """A KV write of one token to slot 0, then a merge of two partials: what the two hostile kernels break."""
    key_cache, value_cache = torch.zeros(4, 2, 2, 4), torch.zeros(4, 2, 2, 4)
    impl.write_kv(
        key=torch.ones(1, 2, 4),
        value=torch.ones(1, 2, 4),
        key_cache=key_cache,
        value_cache=value_cache,
        step=WriteStep(slots=torch.tensor([0])),
    )
    merged = impl.merge(outs=[torch.randn(3, 2, 4), torch.randn(3, 2, 4)], lses=[torch.randn(3, 2)] * 2)
    return key_cache, merged


def one_token_step() -> AttentionStep:
    return AttentionStep(
        table=torch.zeros(1, dtype=torch.int32),
        row_stride=1,
        query_start_loc=torch.tensor([0, 1], dtype=torch.int32),
        seq_lens=torch.tensor([1], dtype=torch.int32),
        query_positions=torch.tensor([0]),
        layout=SlotLayout(1),
        causal=False,
        scale=1.0,
    )


def attend(impl: IsolatedImpl) -> object:
    return impl.paged_attention(
        query=torch.ones(1, 1, 4),
        key_cache=torch.ones(1, 1, 1, 4),
        value_cache=torch.ones(1, 1, 1, 4),
        step=one_token_step(),
    )


def slot_map(impl: IsolatedImpl) -> torch.Tensor:
    step = SlotStep(
        table=torch.arange(4, dtype=torch.int32),
        row_stride=4,
        req_rows=torch.tensor([0]),
        query_start_loc=torch.tensor([0, 2], dtype=torch.int32),
        positions=torch.tensor([0, 1]),
        layout=SlotLayout(1),
    )
    out = torch.empty(2, dtype=torch.int64)
    impl.slot_mapping(step=step, out=out)
    return out


def test_a_sleeping_kernel_times_out_within_its_deadline_and_the_next_call_runs() -> None:
    spec = f"{HOSTILE}:SleepsInAttention"
    impl = IsolatedImpl(spec, "cpu", 1.0)
    try:
        for _ in range(2):  # the first kills the worker; the second is killed by the forking worker itself
            start = time.monotonic()
            with pytest.raises(
                CallTimeout, match=rf"^timed out after 1 s: implementation {spec}: paged_attention$"
            ):
                attend(impl)
            assert time.monotonic() - start < 1.0 + MARGIN
        assert slot_map(impl).tolist() == [0, 1]  # a fresh worker answers the next call
    finally:
        impl.close()
    assert gone(spec)


def test_an_answer_that_is_a_list_fails_at_once_saying_so() -> None:
    impl = IsolatedImpl(f"{HOSTILE}:ReturnsList", "cpu", 30.0)
    try:
        with pytest.raises(AssertionError, match=r"paged_attention returned a list \(\[\[\[.*not the tuple"):
            attend(impl)
    finally:
        impl.close()


def test_an_answer_of_the_wrong_shape_fails_naming_both_shapes() -> None:
    from crossattn_sizing.impl.runner import WrongAnswer, checked_attention

    impl = load_impl(f"{HOSTILE}:WrongShape", "cpu", Isolation(timeout=30.0))
    query, cache = torch.ones(2, 1, 4), torch.ones(1, 2, 1, 4)
    step = AttentionStep(
        table=torch.zeros(1, dtype=torch.int32),
        row_stride=1,
        query_start_loc=torch.tensor([0, 2], dtype=torch.int32),
        seq_lens=torch.tensor([2], dtype=torch.int32),
        query_positions=torch.tensor([0, 1]),
        layout=SlotLayout(2),
        causal=False,
        scale=1.0,
    )
    answer = impl.paged_attention(query=query, key_cache=cache, value_cache=cache, step=step)
    with pytest.raises(
        WrongAnswer, match=r"returned out \[1, 1, 4\] and lse \[2, 1\]; expected out \[2, 1, 4\]"
    ):
        checked_attention(impl.name, answer, query, cache)
    honest = load_impl(
        f"{HOSTILE}:Honest", "cpu", Isolation(timeout=30.0)
    )  # meta: the check passes a right one
    checked_attention(
        honest.name,
        honest.paged_attention(query=query, key_cache=cache, value_cache=cache, step=step),
        query,
        cache,
    )


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("ReturnsMeta", "returned out on device meta (expected cpu)"),
        ("ReturnsGraph", "returned out requiring grad"),
        ("ReturnsHalf", "returned out of dtype torch.float16 (expected torch.float32)"),
        ("ReturnsInfinity", "returned out with infinite values"),
    ],
)
def test_a_returned_tensor_is_checked_before_use_in_a_worker_and_in_process(spec: str, says: str) -> None:
    """Device, dtype, requires_grad and finiteness of what a kernel returns, checked by one check whether
    the kernel ran in its worker or in the judge's process; the violation names the method, what was
    expected and what came back. Meta: the honest kernel passes the same check."""
    from crossattn_sizing.impl.runner import WrongAnswer, checked_attention

    query, cache = torch.ones(1, 1, 4), torch.ones(1, 1, 1, 4)
    for isolation in (Isolation(timeout=30.0), Isolation(in_process=True)):
        impl = load_impl(f"{HOSTILE}:{spec}", "cpu", isolation)
        with pytest.raises(WrongAnswer, match=rf"^paged attention of .*{spec}.* {re.escape(says)}"):
            checked_attention(spec, attend(impl), query, cache)  # type: ignore[arg-type]
    honest = load_impl(f"{HOSTILE}:Honest", "cpu", Isolation(timeout=30.0))
    checked_attention("Honest", attend(honest), query, cache)  # type: ignore[arg-type]


@pytest.mark.slow
def test_a_crashing_implementation_costs_verify_two_workers_not_one_per_shrink_step(tmp_path: Path) -> None:
    """A worker that dies is one failed example with its exit status; after it the test's examples are
    not run, so no shrink step starts a worker (counted, not timed). Two policies: each property's
    worker is the restarted, forking one."""
    starts = tmp_path / "starts"
    spec = f"{HOSTILE}:CountsStartsThenExits"
    status, out, data = verify(
        "--policy", "mrv2-prefix", "--impl", spec, "--max-examples", "50",
        "-k", "test_slot_mapping_matches_reference or test_cross_slot_mapping",
        env={"HOSTILE_STARTS_FILE": str(starts)}, json_path=tmp_path / "v.json",
    )  # fmt: skip
    assert status == 1, out
    assert set(outcomes(data).values()) == {"fails"}, out
    assert "worker died (exit status 3) while running slot_mapping" in out
    assert "Traceback" not in out
    started = starts.read_text().split()
    assert 1 <= len(started) <= 4, f"{len(started)} worker starts: {out[-2000:]}"
    assert gone(spec)


@pytest.mark.slow
def test_an_implementation_answering_on_meta_fails_verify_with_one_example(tmp_path: Path) -> None:
    status, out, data = verify(
        "--impl", f"{HOSTILE}:ReturnsMeta", "--max-examples", "1", "-k", "test_cross_attention_matches_dense",
        json_path=tmp_path / "v.json",
    )  # fmt: skip
    assert status == 1, out
    assert set(outcomes(data).values()) == {"fails"}, out
    assert "returned out on device meta (expected cpu)" in out


@pytest.mark.slow
def test_an_implementation_ignoring_sigterm_does_not_keep_verify_running(tmp_path: Path) -> None:
    spec = f"{HOSTILE}:IgnoresSigterm"
    command = cli(
        "verify",
        "--policy",
        "mrv2",
        "--impl",
        spec,
        "--jobs",
        "1",
        "-k",
        "attention",
        "--json",
        str(tmp_path / "v.json"),
    )
    with running(command) as child:
        child.wait_for(lambda line: "running the property suite" in line)
        time.sleep(3)  # inside the suite, the implementation loaded in its worker
        child.proc.send_signal(signal.SIGTERM)
        child.proc.wait(timeout=120)
    assert child.proc.returncode == 130, child.err
    assert json.loads((tmp_path / "v.json").read_text())["interrupted"] is True
    assert gone(spec)


# Policies: rebinding the judge, threads, dicts, batches ---------------------------------------------
def test_a_policy_rebinding_the_capacity_check_still_fails_check() -> None:
    done = run(
        cli("check", "--policy", f"{HOSTILE}:width_one", "--config", NEMOTRON, "--encoder-len", "3329"),
        env={"HOSTILE_CODE_REBINDS": "1"},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL" in done.stdout


def test_a_policy_patching_the_workers_checks_and_encoders_still_fails_check() -> None:
    """The worker sends the policy's raw answer, encoded by code bound before the policy's module was
    imported: rebinding the harness's width checks and ``json.dumps`` in the worker changes nothing.
    Meta: in the judge's own process (``--in-process``) the same patches fool the judge."""
    argv = ("check", "--policy", "tests.hostile_modules.patches_checker:widths", "--config", NEMOTRON,
            "--encoder-len", "3329")  # fmt: skip
    done = run(cli(*argv))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL" in done.stdout and "(1, 1)" in done.stdout
    fooled = run(cli(*argv, "--in-process"))
    assert fooled.returncode == 0, fooled.stdout + fooled.stderr


def test_the_rebinding_stays_in_the_policys_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """In the worker the rebinding cannot reach the judge; in process (the meta-test) it does."""
    monkeypatch.setenv("HOSTILE_CODE_REBINDS", "1")
    monkeypatch.setattr(capacity, "violations", capacity.violations)  # put back whatever happens below
    monkeypatch.delitem(sys.modules, HOSTILE, raising=False)
    judge = capacity.violations
    isolated = load_checked_policy(f"{HOSTILE}:width_one", Isolation(timeout=30.0))
    assert capacity.violations is judge
    assert capacity.violations(isolated, PROBE_CONFIG, [3329])
    shared = load_checked_policy(f"{HOSTILE}:width_one", Isolation(in_process=True))
    assert capacity.violations is not judge
    assert capacity.violations(shared, PROBE_CONFIG, [3329]) == []  # fooled: why isolation is the default
    monkeypatch.delitem(sys.modules, HOSTILE, raising=False)


def test_a_policy_that_leaves_a_thread_running_does_not_keep_check_alive() -> None:
    start = time.monotonic()
    done = run(
        cli("check", "--policy", f"{HOSTILE}:starts_thread", "--config", NEMOTRON, "--encoder-len", "3329"),
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - start < 120
    assert gone(f"{HOSTILE}:starts_thread")


def test_a_grandchild_in_a_session_of_its_own_does_not_outlive_check(tmp_path: Path) -> None:
    """The worker's supervisor is a child subreaper: a grandchild that called ``setsid()`` (out of the
    worker's process group, its parent gone) is still found and ended by its id when check ends.

    Meta: the same policy called by a plain process in a session of its own leaves the grandchild
    running after that process and its whole group are gone, so the check above could fail."""
    import subprocess

    from crossattn_sizing.base.processes import alive

    spec = f"{HOSTILE}:leaves_a_setsid_grandchild"
    isolated, plain = tmp_path / "isolated.pid", tmp_path / "plain.pid"
    pids = []
    try:
        done = run(cli("check", "--policy", spec, "--config", NEMOTRON, "--encoder-len", "3329"),
                   env={"HOSTILE_PID_FILE": str(isolated)})  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        pids.append(int(isolated.read_text()))
        ends = time.monotonic() + 10.0  # killed before check exits; a SIGKILL lands within moments
        while alive(pids[0]) and time.monotonic() < ends:
            time.sleep(0.1)
        assert not alive(pids[0]), "the setsid grandchild outlived check"
        call = f"from crossattn_sizing.core.policies import PROBE_CONFIG; import {HOSTILE} as h; " \
               "h.leaves_a_setsid_grandchild(PROBE_CONFIG)"
        proc = subprocess.run(
            [sys.executable, "-c", call], env={**os.environ, "HOSTILE_PID_FILE": str(plain)},
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, timeout=300, check=True, cwd=Path(__file__).parents[1],
        )  # fmt: skip
        assert proc.returncode == 0
        pids.append(int(plain.read_text()))
        assert alive(pids[1]), "meta: without a subreaper the grandchild should have outlived its process"
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(("name", "kind"), [("answers_dict", "dict"), ("answers_generator", "generator")])
def test_a_width_answer_that_is_not_a_list_or_tuple_is_refused_naming_its_type(name: str, kind: str) -> None:
    done = run(cli("check", "--policy", f"{HOSTILE}:{name}", "--config", NEMOTRON, "--encoder-len", "3329"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"returned a {kind} (" in done.stderr
    assert "expected a list or tuple of ints, one per group" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("answer", [{1000000: "x", 1000001: "x"}, "ab", (w for w in (1, 2))])
def test_checked_widths_refuses_mappings_strings_and_generators(answer: object) -> None:
    with pytest.raises(PolicyCallError, match=rf"returned a {type(answer).__name__} "):
        checked_widths(lambda config: answer, PROBE_CONFIG)
    assert checked_widths(lambda config: [1000000, 1000001], PROBE_CONFIG) == (1000000, 1000001)  # meta


def test_a_policy_that_exits_is_one_named_error_not_exit_0() -> None:
    done = run(cli("check", "--policy", f"{HOSTILE}:exits", "--config", NEMOTRON, "--encoder-len", "3329"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "worker died (exit status 0) while running widths" in done.stderr


def test_prove_fails_a_policy_whose_batch_method_lies() -> None:
    done = run(cli("prove", "--policy", f"{HOSTILE}:lying_batch", *SMALL_DOMAIN))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "widths_many answered (128,) but a single call answers (42,)" in done.stdout
    assert "holds" not in done.stdout
    honest = run(
        cli("prove", "--policy", f"{HOSTILE}:honest_batch", *SMALL_DOMAIN)
    )  # meta: quiet when honest
    assert honest.returncode == 0, honest.stdout + honest.stderr


def test_the_batch_cross_check_samples_each_batch() -> None:
    from crossattn_sizing.prove.batches import BatchDisagrees, PolicyRaised, cross_check, sample_indices

    assert sample_indices(3) == [0, 1, 2]
    picked = sample_indices(1024)
    assert picked[0] == 0 and picked[-1] == 1023 and len(picked) == 4
    configs = [
        RunnerConfig(max_model_len=m, max_num_batched_tokens=m, groups=(KVCacheGroup(GroupKind.FULL, 16),))
        for m in range(16, 16 * 9, 16)
    ]

    def blocks(config: RunnerConfig) -> tuple[int, ...]:
        return (config.max_model_len // 16,)

    answers = [blocks(c) for c in configs]
    cross_check(blocks, configs, answers)  # meta: agreeing answers pass
    answers[-1] = (0,)
    with pytest.raises(PolicyRaised) as info:
        cross_check(blocks, configs, answers)
    assert isinstance(info.value.error, BatchDisagrees)
    assert "widths_many answered (0,) but a single call answers (8,)" in str(info.value.error)


# Options ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (("--call-timeout", "0"), {}, "--call-timeout"),
        ((), {"CROSSATTN_CALL_TIMEOUT": "soon"}, "CROSSATTN_CALL_TIMEOUT='soon'"),
    ],
)
def test_a_bad_deadline_is_one_line_exit_2(args: tuple[str, ...], env: dict[str, str], says: str) -> None:
    done = run(
        cli("check", "--policy", f"{HOSTILE}:width_one", "--config", NEMOTRON, "--encoder-len", "1", *args),
        env=env,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_in_process_is_said_in_the_report(tmp_path: Path) -> None:
    status, out, data = verify(
        "--impl",
        f"{HOSTILE}:Honest",
        "--in-process",
        "-k",
        "test_slot_mapping_matches_reference",
        json_path=tmp_path / "v.json",
    )
    assert status == 0, out
    assert any("not isolated" in note for note in data["notes"]), data.get("notes")
    assert "not isolated" in out


@pytest.fixture(autouse=True)
def _no_worker_left() -> None:
    """Every worker these tests start ends with its test (or with the process that owns it)."""
    yield
    from crossattn_sizing.base.processes import end_children

    end_children("code")
    assert gone(HOSTILE)
