"""Where the wall time of one ``verify`` of a vLLM source tree goes: processes, properties, examples, calls.

Why: ``crossattn-sizing verify --policy vllm@T --impl vllm@T`` (a contributor's
tree checked as both the sizing policy and the implementation) takes several
times ``verify --policy mrv2`` (issue 39). This says where the time goes
before anything is changed: interpreting kernels, building the reference
outputs, starting workers, moving data between the judge and its workers,
shrinking.

The tree is the recorded 0.25.0 package with its kernels (tests/engine_tree.py,
as tests/test_engine_kernels.py builds it), in a scratch folder with its own
engine cache, offline. The run is one ``verify`` in a subprocess with the nox
``tests`` session's environment, profiled two ways:

- the judge's main process under cProfile (its top functions by cumulative time);
- every Python process of the run (the judge, its second process for half the
  test files, the vLLM workers) sampled every 10 ms by
  benchmarks/profile_hook/sitecustomize.py, which also times each request the
  judge makes of a worker and each Hypothesis example, by test.

Run (a few minutes; writes reports/bench_engine.md and prints it):

    .venv/bin/python benchmarks/bench_engine.py [--keep DIR]
    .venv/bin/python benchmarks/bench_engine.py --analyse DIR   # the report again from kept samples
    .venv/bin/python benchmarks/bench_engine.py --ratio   # issue 39's ratio: reports/bench_engine_ratio.md

``--ratio`` profiles nothing: it times ``verify --policy mrv2`` and then
``verify --policy vllm@T --impl vllm@T`` with the same environment, one after
the other, and prints each wall time, the load beside it and their ratio.

Figures, not a timed test: the machine is shared, so the load average is
recorded beside them and ratios within the one run are what to compare.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_suite_wall import ENV, load_average  # noqa: E402
from tests.engine_tree import build_tree  # noqa: E402

REPORT = ROOT / "reports" / "bench_engine.md"
HOOK = ROOT / "benchmarks" / "profile_hook"

# What a sample is spent on, by the frames on its stack (first match wins, in this order).
JUDGE_KINDS = (
    ("imports", ("<frozen importlib._bootstrap>",)),
    ("starting a worker (its import, waited for)", ("engine/client.py:_spawn",)),
    ("waiting for a worker's answer", ("engine/client.py:_read_line",)),
    ("judge<->worker transfer: encode/decode", ("/json/", "engine/tensors.py", "engine/protocol.py")),
    ("interpreting Triton kernels in the judge", ("triton/runtime/interpreter.py",)),
    ("prove (the capacity row's domain)", ("crossattn_sizing/prove/",)),
    ("reference outputs (oracle, dense attention)",
     ("reference/", "properties/oracle.py", ":dense_reference")),
    ("torch (harness-side tensors)", ("torch/",)),
    ("Hypothesis engine (drawing, bookkeeping)", ("hypothesis/",)),
)
WORKER_KINDS = (
    ("idle: waiting for a request", ()),  # decided in kind_of: in serve, outside any op
    ("start-up: importing the tree", ()),  # decided in kind_of: before serve
    ("interpreting Triton kernels", ("triton/runtime/interpreter.py",)),
    ("judge<->worker transfer: encode/decode", ("/json/", "engine/tensors.py", "engine/protocol.py")),
    ("torch", ("torch/",)),
)


def role(argv: list[str]) -> str:
    """What a sampled process was, from its command line."""
    text = " ".join(argv)
    if "share_process" in text:
        return "judge, second process"
    if "engine/worker" in text or "engine.worker" in text:
        return "vLLM worker"
    if "verify" in argv:
        return "judge"
    return "other: " + text[:60]


def kind_of(process: str, stack: list[str]) -> str:
    """The category of one sample of ``process`` with ``stack`` (outermost frame first)."""
    joined = "\n".join(stack)
    if process == "vLLM worker":
        if not any(f.endswith("worker.py:serve") for f in stack):
            return "start-up: importing the tree"
        if "worker.py:_dispatch" not in joined:
            return "idle: waiting for a request"
        kinds = WORKER_KINDS[2:]
    else:
        kinds = JUDGE_KINDS
    for name, marks in kinds:
        if any(mark in joined for mark in marks):
            return name
    return "other Python"


def op_of(stack: list[str]) -> str:
    """The worker op a sample is in (``release.py:op_paged_attention`` -> ``paged_attention``), if any."""
    for frame in reversed(stack):
        if ":op_" in frame:
            return frame.rsplit(":op_", 1)[1]
    return "-"


def kernel_of(stack: list[str]) -> str:
    """The innermost frame of the tree's attention code (``ops/...``, ``backends/...``) on an interpreted
    stack: the Triton kernel or helper being interpreted."""
    for frame in reversed(stack):
        if frame.startswith(("ops/", "backends/", "gpu/")):
            return frame
    return "(no frame of the tree)"


def property_of(test: str) -> str:
    """``properties/test_x.py::test_y (call)`` -> ``test_x::test_y``; outside pytest: ``(no test)``."""
    if not test:
        return "(outside a test: collection, prove row, report)"
    path, _, rest = test.partition("::")
    return f"{Path(path).stem}::{rest.split(' ')[0]}"


def shrinking(stack: Iterable[str]) -> bool:
    return any("conjecture/shrinker.py" in f for f in stack)


def seconds_table(title: str, counts: collections.Counter[str], interval: float, total: float) -> list[str]:
    lines = [f"| {title} | s | share |", "| --- | ---: | ---: |"]
    for name, n in counts.most_common():
        lines.append(f"| {name} | {n * interval:.1f} | {100 * n * interval / total:.0f}% |")
    return lines


def summary(by_role: dict[str, collections.Counter[str]], shrinking_s: float, wall: float) -> list[str]:
    """The five figures issue 39 asks for, in seconds and as shares of the run's wall time."""
    judges = collections.Counter[str]()
    for who, counts in by_role.items():
        if who.startswith("judge"):
            judges.update(counts)
    workers = by_role.get("vLLM worker", collections.Counter())

    def pick(counts: collections.Counter[str], *names: str) -> float:
        return sum(counts.get(n, 0.0) for n in names)

    rows = [
        ("interpreting Triton kernels (workers)", pick(workers, "interpreting Triton kernels")),
        ("building reference outputs (judge)", pick(judges, "reference outputs (oracle, dense attention)")),
        ("starting workers (their import)", pick(workers, "start-up: importing the tree")),
        ("judge<->worker transfer: encode/decode (both sides)",
         pick(judges, "judge<->worker transfer: encode/decode") + pick(workers, "judge<->worker transfer: "
                                                                         "encode/decode")),
        ("shrinking (judge, examples the shrinker ran)", shrinking_s),
        ("the judge waiting on a worker", pick(judges, "waiting for a worker's answer",
                                               "starting a worker (its import, waited for)")),
    ]  # fmt: skip
    return [
        "",
        "| where (issue 39's list) | s | of the wall time |",
        "| --- | ---: | ---: |",
        *(f"| {name} | {sec:.1f} | {100 * sec / wall:.0f}% |" for name, sec in rows),
        "",
    ]


def read_run(folder: Path, procs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The run's figures (``run.json``); for a run still going or cut off, what its samples show so far."""
    if (folder / "run.json").exists():
        return dict(json.loads((folder / "run.json").read_text()))
    if procs is None:
        procs = [json.loads(p.read_text()) for p in sorted((folder / "samples").glob("*.json"))]
    start, end = min(p["start"] for p in procs), max(p["end"] for p in procs)
    return {
        "wall_s": end - start, "status": "none yet: the run had not ended (partial figures, up to its last "
        "samples)", "load_before": "n/a", "load_after": load_average(), "load_median": os.getloadavg()[0],
        "command": "crossattn-sizing verify --policy vllm@T --impl vllm@T",
        "when": datetime.fromtimestamp(start, timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }  # fmt: skip


def analyse(folder: Path) -> tuple[list[str], dict[str, Any]]:
    """The report's body from a run's kept samples (``folder``/samples) and its ``run.json``."""
    procs = [json.loads(p.read_text()) for p in sorted((folder / "samples").glob("*.json"))]
    run = read_run(folder, procs)
    wall = run["wall_s"]
    lines = [
        f"- wall time: **{wall:.1f} s**, exit status {run['status']}; load average (1/5/15 min) before "
        f"{run['load_before']}, after {run['load_after']}; median of the 1-min load sampled every 10 s "
        f"during the run: {run['load_median']:.1f} (2 cores)",
        "",
        "## Processes",
        "",
        "Lifetime is first to last sign of life; sampled is the wall time its main thread's samples "
        "(10 ms apart, each weighted by the time since the previous) stand for.",
        "",
        "| process | pid | lifetime s | sampled s | where its time went (top 3) |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    by_role: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    by_op: collections.Counter[tuple[str, str]] = collections.Counter()
    by_kernel: collections.Counter[str] = collections.Counter()
    by_prop: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    shrink_samples: collections.Counter[str] = collections.Counter()
    requests: list[tuple[str, str, float]] = []
    examples: list[tuple[str, float, bool]] = []
    interval = 1.0  # the hook's stack counts are seconds (each sample weighted by the time since the last)
    for proc in sorted(procs, key=lambda p: p["start"]):
        who = role(proc["argv"])
        mine: collections.Counter[str] = collections.Counter()
        for test, stack, n in proc["stacks"]:
            kind = kind_of(who, stack)
            mine[kind] += n
            if who == "vLLM worker":
                by_op[(op_of(stack), kind)] += n
                if kind == "interpreting Triton kernels":
                    by_kernel[kernel_of(stack)] += n
            else:
                by_prop[property_of(test)][kind] += n
                if shrinking(stack):
                    shrink_samples[property_of(test)] += n
        by_role[who].update(mine)
        sampled = sum(mine.values()) * interval
        top = ", ".join(f"{k} {100 * n / max(1, sum(mine.values())):.0f}%" for k, n in mine.most_common(3))
        lines.append(f"| {who} | {proc['pid']} | {proc['end'] - proc['start']:.1f} | {sampled:.1f} | {top} |")
        requests += [tuple(r) for r in proc["requests"]]  # type: ignore[misc]
        examples += [tuple(e) for e in proc["examples"]]  # type: ignore[misc]
    lines[1:1] = summary(by_role, sum(shrink_samples.values()), wall)
    for who, counts in sorted(by_role.items()):
        total = sum(counts.values()) * interval
        table = seconds_table("spent on", counts, interval, total)
        lines += ["", f"## {who}: {total:.1f} s sampled", "", *table]
    worker_total = sum(n for n in by_op.values()) * interval
    lines += ["", "## Worker time by op (every vLLM worker)", "", "| op | spent on | s | share |",
              "| --- | --- | ---: | ---: |"]  # fmt: skip
    for (op, kind), n in by_op.most_common(20):
        share = 100 * n * interval / max(worker_total, 1e-9)
        lines.append(f"| {op} | {kind} | {n * interval:.1f} | {share:.0f}% |")
    kernel_total = max(sum(by_kernel.values()), 1e-9)
    lines += ["", "## Interpreted kernels (the tree's own Triton functions, every vLLM worker)", "",
              *seconds_table("innermost frame of the tree", by_kernel, interval, kernel_total)]  # fmt: skip
    per_op: dict[str, list[float]] = collections.defaultdict(list)
    for _, op, took in requests:
        per_op[op].append(took)
    lines += ["", "## Requests to workers (kernel calls and sizing), timed in the judge", "",
              "Round trip: the judge's write, the worker's decode, run and encode, the judge's read and "
              "decode.", "", "| op | calls | total s | median ms | max ms |",
              "| --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for op, times in sorted(per_op.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"| {op} | {len(times)} | {sum(times):.1f} | {1000 * statistics.median(times):.1f} | "
                     f"{1000 * max(times):.0f} |")  # fmt: skip
    lines += ["", "## Properties (both judge processes)", "",
              "Wall is the judge samples taken while the test ran; examples are Hypothesis' calls of the "
              "test body (those the shrinker made in brackets); requests are worker round trips made by "
              "the test.",
              "", "| property | judge s | of it shrinking s | examples (shrinking) | median example ms | "
              "worker requests | request s |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    ex_by: dict[str, list[tuple[float, bool]]] = collections.defaultdict(list)
    for test, took, shrunk in examples:
        ex_by[property_of(test)].append((took, shrunk))
    rq_by: dict[str, list[float]] = collections.defaultdict(list)
    for test, _, took in requests:
        rq_by[property_of(test)].append(took)
    for prop, counts in sorted(by_prop.items(), key=lambda kv: -sum(kv[1].values())):
        ex = ex_by.get(prop, [])
        med = f"{1000 * statistics.median(t for t, _ in ex):.0f}" if ex else "-"
        lines.append(
            f"| {prop} | {sum(counts.values()) * interval:.1f} | {shrink_samples[prop] * interval:.1f} | "
            f"{len(ex)} ({sum(1 for _, s in ex if s)}) | {med} | {len(rq_by.get(prop, []))} | "
            f"{sum(rq_by.get(prop, [])):.1f} |"
        )
    figures = {
        "wall_s": wall,
        "by_role": {who: {k: round(n * interval, 1) for k, n in c.items()} for who, c in by_role.items()},
        "requests": {op: [len(t), round(sum(t), 1)] for op, t in per_op.items()},
        "shrinking_s": round(sum(shrink_samples.values()) * interval, 1),
        "examples": len(examples),
    }
    return lines, figures


def judge_profile(path: Path, top: int = 25) -> list[str]:
    """The judge's top functions by cumulative time (cProfile), as a fenced block."""
    if not path.exists():
        return ["(no cProfile output: the judge did not exit normally)"]
    out = tempfile.SpooledTemporaryFile(mode="w+")  # noqa: SIM115 (read back below)
    stats = pstats.Stats(str(path), stream=out)  # type: ignore[arg-type]
    stats.sort_stats("cumulative").print_stats(top)
    out.seek(0)
    text = out.read()
    body = text[text.find("   ncalls"):] if "   ncalls" in text else text
    short = [ln.replace(str(ROOT) + "/", "").replace(sys.prefix + "/", "") for ln in body.splitlines()]
    return ["```", *[ln for ln in short if ln.strip()], "```"]


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    """One command's wall time, exit status, load around it and verdict lines (the table's rows)."""
    loads: list[float] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(10):
            loads.append(os.getloadavg()[0])

    threading.Thread(target=watch, daemon=True).start()
    before = load_average()
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    done.set()
    rows = [ln.strip() for ln in proc.stdout.splitlines() if "│" in ln]
    median = statistics.median(loads) if loads else os.getloadavg()[0]
    return {"wall_s": wall, "status": proc.returncode, "load_before": before, "load_after": load_average(),
            "load_median": median, "rows": rows, "output": proc.stdout + proc.stderr}  # fmt: skip


def run_once(folder: Path) -> None:
    """Build the tree, run verify profiled, keep the samples and the figures of the run in ``folder``."""
    samples = folder / "samples"
    samples.mkdir(parents=True)
    tree = build_tree(folder / "checkout", "0.25.0", kernels=True)
    env = dict(os.environ, **ENV)
    env.update({
        "CROSSATTN_ENGINE_CACHE": str(folder / "engine-cache"), "XDG_CACHE_HOME": str(folder / "xdg"),
        "HOME": str(folder / "home"), "CROSSATTN_OFFLINE": "1", "BENCH_ENGINE_SAMPLES": str(samples),
        "PYTHONPATH": os.pathsep.join([str(HOOK), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    })  # fmt: skip
    (folder / "home").mkdir()
    command = [sys.executable, "-m", "cProfile", "-o", str(folder / "judge.prof"), "-m", "crossattn_sizing",
               "verify", "--policy", f"vllm@{tree}", "--impl", f"vllm@{tree}"]  # fmt: skip
    timing = timed(command, folder, env)
    (folder / "verify.out").write_text(timing["output"])
    run = {
        **{k: timing[k] for k in ("wall_s", "status", "load_before", "load_after", "load_median")},
        "command": "crossattn-sizing verify --policy vllm@T --impl vllm@T", "when":
        datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }  # fmt: skip
    (folder / "run.json").write_text(json.dumps(run))


def report(folder: Path) -> str:
    run = read_run(folder)
    body, figures = analyse(folder)
    out = folder / "verify.out"
    verdicts = [ln for ln in out.read_text().splitlines() if "│" in ln or "┃" in ln] if out.exists() else []
    text = "\n".join([
        "# Where one `verify` of a vLLM tree spends its wall time",
        "",
        "Regenerate: `.venv/bin/python benchmarks/bench_engine.py` (a few minutes)",
        "",
        f"`{run['command']}`, T the recorded 0.25.0 package with its kernels (tests/engine_tree.py), "
        f"{run['when']}, {os.cpu_count()} CPUs visible (shared with other work), python "
        f"{sys.version.split()[0]}, environment of the nox `tests` session (profile `ci`, "
        "`TRITON_INTERPRET=1`), scratch engine cache, offline. The judge ran under cProfile; every "
        "process was sampled every 10 ms (benchmarks/profile_hook/sitecustomize.py). One run: the "
        "figures are shares and ratios within it.",
        "",
        *body,
        "",
        "## The judge's main process under cProfile (top 25 by cumulative time)",
        "",
        *judge_profile(folder / "judge.prof"),
        "",
        "## Verdicts of the profiled run",
        "",
        "```",
        *verdicts,
        "```",
        "",
        f"<!-- figures: {json.dumps(figures)} -->",
        "",
    ])
    return text


RATIO_REPORT = ROOT / "reports" / "bench_engine_ratio.md"
RATIO_HEADER = """# A contributor's tree verify against `verify --policy mrv2`, in one run

Regenerate: `.venv/bin/python benchmarks/bench_engine.py --ratio` (both commands, one after the other)
"""
RATIO_TARGET = 2.5
"""Issue 39: a contributor's tree verify takes at most this many times ``verify --policy mrv2``."""


def ratio(folder: Path, release: str = "0.25.0") -> list[str]:
    """``verify --policy mrv2`` then ``verify --engine vllm@T`` (T: the recorded ``release`` tree), one
    after the other on the same machine: their wall times, the load beside each, and the ratio."""
    tree = build_tree(folder / "checkout", release, kernels=True)
    env = dict(os.environ, **ENV)
    env.update({"CROSSATTN_ENGINE_CACHE": str(folder / "engine-cache"), "XDG_CACHE_HOME": str(folder / "xdg"),
                "HOME": str(folder / "home"), "CROSSATTN_OFFLINE": "1"})  # fmt: skip
    (folder / "home").mkdir(exist_ok=True)
    cli = [sys.executable, "-m", "crossattn_sizing", "verify"]
    runs = {
        "verify --policy mrv2": timed([*cli, "--policy", "mrv2"], folder, env),
        f"verify --policy vllm@T --impl vllm@T ({release} tree)":
            timed([*cli, "--policy", f"vllm@{tree}", "--impl", f"vllm@{tree}"], folder, env),
    }  # fmt: skip
    lines = [f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}, {os.cpu_count()} CPUs visible (shared), "
             "environment of the nox `tests` session (profile `ci`, `TRITON_INTERPRET=1`), offline", "",
             "| command | wall s | exit | load before | load median | load after |",
             "| --- | ---: | ---: | --- | ---: | --- |"]  # fmt: skip
    for name, r in runs.items():
        lines.append(f"| `{name}` | {r['wall_s']:.1f} | {r['status']} | {r['load_before']} | "
                     f"{r['load_median']:.1f} | {r['load_after']} |")  # fmt: skip
    base, tree_run = (r["wall_s"] for r in runs.values())
    rows = [row for r in runs.values() for row in r["rows"]]
    lines += ["", f"ratio (tree / mrv2): **{tree_run / base:.2f}** (issue 39's target: at most "
              f"{RATIO_TARGET})", "", "Verdict rows:", "", "```", *rows, "```"]  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="keep the run's samples, profile and output in this folder")
    parser.add_argument("--analyse", type=Path, help="write the report from a kept folder; run nothing")
    parser.add_argument("--no-report", action="store_true", help="print only, do not write reports/")
    parser.add_argument("--ratio", metavar="RELEASE", nargs="?", const="0.25.0",
                        help="time verify --policy mrv2 and the tree's verify in one run, print the ratio "
                        "and write it to reports/bench_engine_ratio.md (no profile)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.ratio:
        with tempfile.TemporaryDirectory(prefix="bench-engine-ratio-") as scratch:
            text = "\n".join([RATIO_HEADER, *ratio(Path(scratch), args.ratio), ""])
        print(text)
        if not args.no_report:
            RATIO_REPORT.write_text(text)
            print(f"wrote {RATIO_REPORT.relative_to(ROOT)}")
        return
    if args.analyse:
        folder = args.analyse
    else:
        folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-engine-"))
        run_once(folder)
    try:
        text = report(folder)
    finally:
        if not (args.keep or args.analyse):
            shutil.rmtree(folder, ignore_errors=True)
    print(text)
    if not args.no_report:
        REPORT.write_text(text)
        print(f"wrote {REPORT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
