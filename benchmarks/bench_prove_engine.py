"""What ``prove`` pays per config on an engine policy (``vllm==X``), and the wall time of its edge-domain row.

Why: an engine policy answers from a worker process (docs/engine.md), and the
edge domain has 2.4 million configs, every one of them distinct as a
``RunnerConfig`` (``M``, ``E`` and ``S`` all vary, and the release's sizing
reads all three), so nothing can be asked once for many. What a config costs
is one round trip plus the release's sizing. Measured, in interleaved rounds
on the same configs of the domain:

* ``one request per config``: a ``widths`` request each, what ``policy(config)``
  costs when its cache misses (the path prove took before ``widths_many``);
* ``widths_many, 1 worker``: batches of ``BATCH`` configs per request;
* ``widths_many, N workers``: the same batches spread over the release's
  processes (``CROSSATTN_ENGINE_WORKERS``, default: usable CPUs, at most 4).

``--full`` also runs verify's prove row (:func:`crossattn_sizing.prove.verify_row.prove_property`)
on the whole edge domain and reports its wall time. Figures, not a timed test;
the machine's load average is printed beside them. Run (the release must be in
the engine cache, or downloadable):

    .venv/bin/python benchmarks/bench_prove_engine.py [--version 0.25.0] [--rounds 3] [--full]

Writes reports/bench_prove_engine.md and prints the same.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import date
from pathlib import Path

from crossattn_sizing.base.settings import ENGINE_WORKERS
from crossattn_sizing.engine.client import close_all, parallel_workers
from crossattn_sizing.engine.vllm.adapters import BATCH, VllmPolicy
from crossattn_sizing.prove.edges import edge_domain
from crossattn_sizing.prove.verify_row import prove_property

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "bench_prove_engine.md"
SINGLE = 1000
"""Configs asked one request each per round (enough for a median; the batched rows ask more)."""
SAMPLE = 32768
"""Configs asked per batched round: a prove tile."""


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def with_workers(n: int) -> None:
    os.environ[ENGINE_WORKERS] = str(n)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="0.25.0", help="vLLM release (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians shown")
    parser.add_argument("--full", action="store_true", help="also time the prove row on the whole domain")
    args = parser.parse_args(argv)
    spec = f"vllm=={args.version}"
    parallel = parallel_workers()
    parts = edge_domain()
    size = sum(p.size for p in parts)
    part = parts[len(parts) // 2]  # a middle part: bs and C away from the extremes
    configs = [part.config(0, j) for j in range(min(part.num_lengths, SAMPLE))]
    started = time.perf_counter()
    policy = VllmPolicy(spec)
    start_s = time.perf_counter() - started
    with_workers(parallel)
    policy.widths_many(configs[: BATCH * parallel])  # start the siblings before timing anything
    rows: dict[str, list[float]] = {}
    answers: dict[str, list] = {}
    before = load()
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        ask = policy.worker.request
        single = [tuple(ask("widths", config=c.to_dict())["widths"]) for c in configs[:SINGLE]]
        rows.setdefault("one request per config", []).append((time.perf_counter() - t0) / SINGLE)
        answers["single"] = single
        for n in sorted({1, parallel}):
            with_workers(n)
            t0 = time.perf_counter()
            got = policy.widths_many(configs)
            name = f"widths_many, {n} worker{'s' * (n > 1)}"
            rows.setdefault(name, []).append((time.perf_counter() - t0) / len(configs))
            answers[name] = got
    after = load()
    same = all(a[:SINGLE] == answers["single"] for k, a in answers.items() if k != "single")
    lines = [
        f"Regenerate: `.venv/bin/python benchmarks/bench_prove_engine.py --version {args.version} "
        f"--rounds {args.rounds}{' --full' if args.full else ''}`",
        "",
        f"# prove on `{spec}`: cost per config",
        "",
        f"Measured {date.today().isoformat()}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs "
        f"visible, load average {before} (1/5/15 min) before the rounds and {after} after (the machine "
        f"is shared). Worker start-up: {start_s:.1f} s. Configs: part `{part.specs['domain']}` of the edge "
        f"domain, {len(configs):,} per batched round, the first {SINGLE:,} of them for the single "
        f"requests; median of {args.rounds} interleaved rounds. Batched answers equal single ones on the "
        f"configs both asked: {'yes' if same else 'NO'}.",
        "",
        "| path | us per config (median) | rounds (us) | edge domain at this rate |",
        "| --- | ---: | --- | ---: |",
    ]
    for name, values in rows.items():
        med = statistics.median(values)
        shown = ", ".join(f"{v * 1e6:.0f}" for v in values)
        lines.append(f"| {name} | {med * 1e6:.0f} | {shown} | {size * med / 60:.1f} min |")
    if args.full:
        with_workers(parallel)
        at_start = load()
        t0 = time.perf_counter()
        row = prove_property(policy, spec, parts)
        wall = time.perf_counter() - t0
        lines += [
            "",
            f"# verify's prove row on `{spec}`, whole edge domain ({size:,} configs)",
            "",
            f"{parallel} worker process(es) (siblings started inside the row); load average {at_start} "
            f"at the start, {load()} at the end.",
            "",
            f"- outcome: {row.outcome}; configs checked: {row.examples:,}",
            f"- wall time: {wall:.0f} s ({size / wall:,.0f} configs/s)",
        ]
        if row.diagnosis:
            lines.append(f"- diagnosis: {row.diagnosis}")
    close_all()
    text = "\n".join(lines) + "\n"
    print(text, end="")
    REPORT.write_text(text)
    print(f"wrote {REPORT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
