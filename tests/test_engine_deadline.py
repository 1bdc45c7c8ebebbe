"""One deadline for every call into an engine's code, and nothing it started left behind.

Held-out variants of issue 45's hangs (none is the issue's own case): a
``vllm@PATH`` tree whose sizing waits forever in a helper it calls, spins in
its own loop, hangs only past one block size, or starts a detached sleeper
before it blocks; an SGLang tree whose decode step blocks on a lock it already
holds. Each must end with the verdict "fails" (the release's code did not
answer within the deadline, the step named), with the option typed or the
variable set, and leave no process. Deadlines are 2 s; nothing here asserts a
duration: a hung run is stopped by ``tests.processes.run``'s generous limit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.engine_tree import build_tree
from tests.processes import cli, run
from tests.sglang_tree import copy_tree

pytestmark = pytest.mark.timeout(900)

NEMOTRON = json.dumps(
    {"max_model_len": 2048, "max_num_batched_tokens": 4096,
     "groups": [{"kind": "full", "block_size": 16}, {"kind": "cross", "block_size": 16}]}
)  # fmt: skip

MATH_UTILS = "vllm/utils/math_utils.py"
MODEL_RUNNER = "vllm/v1/worker/gpu/model_runner.py"
CDIV = "def cdiv(a, b):\n"
APPEND = "            block_sizes.append(spec.block_size)\n"

WAITS_IN_HELPER = (MATH_UTILS, CDIV, CDIV + "    import threading\n    threading.Event().wait()\n")
"""The sizing's helper ``cdiv`` waits on an event nobody sets."""
SPINS_IN_LOOP = (MODEL_RUNNER, APPEND, "            while spec.block_size:\n                pass\n" + APPEND)
"""The sizing loop itself spins (a busy loop: no sleep, no lock)."""
HANGS_ON_BS4 = (MATH_UTILS, CDIV, CDIV + "    import time\n    while b == 4:\n        time.sleep(0.05)\n")
"""Only a group of block size 4 hangs (``cdiv(len, block_size * dcp)`` with one DCP rank)."""
DETACHES_THEN_WAITS = (
    MATH_UTILS, CDIV,
    CDIV + (
        "    import os, threading, time\n"
        "    child = os.fork()\n"
        "    if child == 0:\n"
        "        os.setsid()\n"
        "        if os.fork() == 0:\n"
        "            with open(os.environ['DEADLINE_SLEEPER'] + '.part', 'w') as out:\n"
        "                out.write(str(os.getpid()))\n"
        "            os.rename(os.environ['DEADLINE_SLEEPER'] + '.part', os.environ['DEADLINE_SLEEPER'])\n"
        "            time.sleep(3600)\n"
        "        os._exit(0)\n"
        "    os.waitpid(child, 0)\n"
        "    threading.Event().wait()\n"
    ),
)
"""Starts a sleeper in a session of its own whose parent exits at once (an orphan), then waits forever."""


def vllm_tree(root: Path, change: tuple[str, str, str]) -> Path:
    """The recorded 0.25.0 tree with one line of its sizing changed (exactly once)."""
    tree = build_tree(root, "0.25.0")
    rel, old, new = change
    path = tree / rel
    text = path.read_text()
    assert text.count(old) == 1, (rel, old)
    path.write_text(text.replace(old, new))
    return tree


def processes_naming(text: str) -> list[int]:
    """Live processes (not zombies) whose command line holds ``text`` (a test's own temporary path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if text.encode() in cmdline and stat[stat.rfind(")") + 2 :].split()[0] != "Z":
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"


@pytest.mark.parametrize(
    ("change", "option", "variable", "step"),
    [
        # typed over the variable; the variable alone
        (WAITS_IN_HELPER, ["--call-timeout", "2"], "600", "cdiv (vllm/utils/math_utils.py:"),
        (SPINS_IN_LOOP, [], "2", "initialize_kv_cache (vllm/v1/worker/gpu/model_runner.py:"),
    ],
    ids=["helper-waits-typed", "loop-spins-variable"],
)
def test_check_on_a_vllm_tree_whose_sizing_hangs_fails_within_the_deadline(
    tmp_path: Path, change: tuple[str, str, str], option: list[str], variable: str, step: str
) -> None:
    tree = vllm_tree(tmp_path / "tree", change)
    line = cli("check", "--engine", f"vllm@{tree}", *option, "--config", NEMOTRON, "--encoder-len", "3329")
    done = run(line, env={"CROSSATTN_CALL_TIMEOUT": variable})
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    fail = [line for line in done.stdout.splitlines() if line.startswith("FAIL  ")]
    assert len(fail) == 1 and "timed out after 2 s" in fail[0], done.stdout
    assert "the release's code did not answer (widths), stopped in " + step in fail[0], fail[0]
    assert "Traceback" not in done.stdout + done.stderr
    assert processes_naming(str(tree)) == []


def test_prove_on_a_vllm_tree_that_hangs_on_one_block_size_fails_naming_that_config(tmp_path: Path) -> None:
    """Only block size 4 hangs: prove's batch, then the config asked alone, time out; prove fails that config
    (a judged observation: exit 1), never a bad input, and ends every worker it started."""
    tree = vllm_tree(tmp_path / "tree", HANGS_ON_BS4)
    domain = ("--block-size", "2-4:2", "--max-model-len", "8-64:28", "--encoder-budget", "8-64:28",
              "--no-progress")  # fmt: skip
    done = run(cli("prove", "--policy", f"vllm@{tree}", *domain), env={"CROSSATTN_CALL_TIMEOUT": "2"})
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "FAILS: timed out after 2 s" in done.stdout and "the release's code did not answer" in done.stdout
    replay = next(line for line in done.stdout.splitlines() if "replay the single call:" in line)
    assert '"block_size":4' in replay, replay
    assert "Traceback" not in done.stdout + done.stderr
    assert processes_naming(str(tree)) == []


def test_verify_on_a_vllm_tree_whose_sizing_spins_fails_the_property_in_the_deadline(tmp_path: Path) -> None:
    """verify (the property suite, with the tree as policy and implementation) with the variable alone: the
    property fails on the example whose sizing did not answer, naming the config, and no worker is left."""
    tree = vllm_tree(tmp_path / "tree", SPINS_IN_LOOP)
    done = run(cli("verify", "--engine", f"vllm@{tree}", "-k", "test_coverage", "--max-examples", "5"),
               env={"CROSSATTN_CALL_TIMEOUT": "2"})  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "test_capacity::test_coverage fails:" in done.stdout, done.stdout
    assert ("timed out after 2 s: " f"vllm@{tree}: the release's code did not answer (widths), stopped in "
            "initialize_kv_cache (vllm/v1/worker/gpu/model_runner.py:") in done.stdout  # fmt: skip
    assert "(asked for the widths of M=" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    assert processes_naming(str(tree)) == []


def test_a_detached_process_the_hung_sizing_started_is_ended_with_its_worker(tmp_path: Path) -> None:
    """The tree's sizing leaves an orphan in a session of its own, then blocks: the timeout ends the worker
    and that orphan (the worker's supervisor is a subreaper), not only the worker's process group."""
    tree = vllm_tree(tmp_path / "tree", DETACHES_THEN_WAITS)
    sleeper = tmp_path / "sleeper.pid"
    done = run(cli("check", "--engine", f"vllm@{tree}", "--call-timeout", "2", "--config", NEMOTRON,
                   "--encoder-len", "3329"), env={"DEADLINE_SLEEPER": str(sleeper)})  # fmt: skip
    said = done.stdout + done.stderr[-3000:]
    assert done.returncode == 1 and "FAIL  timed out after 2 s" in done.stdout, said
    assert sleeper.exists(), "the tree's sizing never ran"
    assert not alive(int(sleeper.read_text())), "the detached sleeper outlived the run"
    assert processes_naming(str(tree)) == []


TORCH_NATIVE = "sglang/srt/layers/attention/torch_native_backend.py"
DECODE_LINE = "        q = q.reshape(-1, layer.tp_q_head_num * layer.qk_head_dim)\n"


def test_an_sglang_decode_step_blocked_on_a_lock_fails_and_waits_the_deadline_once(tmp_path: Path) -> None:
    """forward_decode takes a lock it already holds. The property fails with a headline naming the step and
    the deadline; after the first timeout the test's later examples are not run and its final replay
    fails at once, so the step is entered once (each entry appends to a file), not once per shrink step."""
    entered = tmp_path / "entered"
    blocks = ("        import threading; open(" + repr(str(entered)) + ", 'a').write('x')\n"
              "        held = threading.Lock(); held.acquire(); held.acquire()\n")  # fmt: skip
    tree = copy_tree(tmp_path / "tree", {TORCH_NATIVE: (DECODE_LINE, blocks + DECODE_LINE)})
    done = run(cli("verify", "--engine", f"sglang@{tree}", "-k", "test_cross_attention_matches_reference",
                   "--max-examples", "6"), env={"CROSSATTN_CALL_TIMEOUT": "2"})  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert ("the release's code did not answer within 2 s, stopped in forward_decode "
            f"({TORCH_NATIVE}:") in done.stdout, done.stdout  # fmt: skip
    assert "did not lay the batch out" not in done.stdout
    assert entered.read_text() == "x", "the blocked step was entered again after its timeout"
    assert "Traceback" not in done.stdout + done.stderr
    assert processes_naming(str(tree)) == []


def test_an_unchanged_vllm_tree_still_holds_under_a_deadline(tmp_path: Path) -> None:
    """The control: the same check on the recorded tree answers well within the deadline and is judged as
    before (the pre-fix 0.25.0 sizing covers the request: exit 0), its worker ended at exit."""
    tree = build_tree(tmp_path / "tree", "0.25.0")
    done = run(cli("check", "--engine", f"vllm@{tree}", "--call-timeout", "120", "--config", NEMOTRON,
                   "--encoder-len", "3329"))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "OK" in done.stdout and "timed out" not in done.stdout
    assert processes_naming(str(tree)) == []
