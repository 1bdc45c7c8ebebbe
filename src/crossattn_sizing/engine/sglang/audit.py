"""``audit --engine sglang``: SGLang's releases side by side, each row from running that release's code.

For each release (``--engine sglang`` alone: :data:`~crossattn_sizing.engine.sglang.releases.AUDIT_RELEASES`;
or each ``--engine sglang==X`` / ``sglang@PATH`` given) one worker runs the
release's own code (:mod:`crossattn_sizing.engine.sglang.run`) and answers:

- **FA3 text table**: how its eager decode path indexes ``req_to_token`` for
  the text page table on a one-request batch: a tensor of columns per request
  (``per-request gather``) or a range (``slice``). Observed, never looked up.
- **read side**: :data:`PROBES`, mixed decode batches every request of which
  SGLang's rule admits alone, through both metadata paths and judged as the
  property judges them; the first that fails is printed with the ``check``
  line that replays it.
- **write side**: the same batches and the longest request the server admits,
  laid into the release's own rows by its own extend and decode rule.
- **start-up (capture / replay)**: :data:`STARTUP_PROBES`, servers whose
  CUDA-graph dummy batches (the runner's own dummy lengths through FA3's own
  capture and replay code, :mod:`crossattn_sizing.engine.sglang.startup`) are
  judged on each path; each path's first failure is printed with the
  release's ``file:line`` and its ``check`` line.

Below the table: the first release (in release order) whose read side fails.
Verdicts are the release's; what the harness could not run is "not run",
naming the piece. The full property (hypothesis, shrinking) is
``verify --engine sglang==X``.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crossattn_sizing.base.errors import OptionError, ReleaseUnavailable
from crossattn_sizing.base.outcome import Outcome, exit_status
from crossattn_sizing.core.admission_rules import EngineRequest, SglangAdmission
from crossattn_sizing.core.check_line import batch_check_line as check_line
from crossattn_sizing.engine.client import EngineCrash
from crossattn_sizing.engine.sglang.releases import AUDIT_RELEASES, version_key
from crossattn_sizing.engine.sglang.source import RELEASE_PREFIX, TREE_PREFIX

if TYPE_CHECKING:
    from crossattn_sizing.engine.sglang.client import OwnAdmission

Triple = tuple[int, int, int]

PROBES: tuple[tuple[int, int, tuple[Triple, ...]], ...] = (
    # (context_len, kv_capacity, batch): Mllama 4 tiles at 560 px (6404 encoder tokens) beside a long text
    (8192, 32768, ((6404, 20, 21), (0, 3000, 3001))),
    # Whisper (1500 frames) beside a long text request
    (8192, 32768, ((1500, 4, 5), (0, 7000, 7001))),
    # the same shapes with a neighbour short enough for every column to lie in the row
    (8192, 32768, ((6404, 20, 21), (0, 1000, 1001))),
    # three requests, a small server
    (512, 2048, ((300, 2, 4), (0, 100, 150), (40, 3, 9))),
)
"""Mixed decode batches (``(E, prompt, d)`` per request) the read and write sides are probed with."""

STARTUP_PROBES: tuple[tuple[int, tuple[int, ...], int, int | None], ...] = (
    # (context_len, capture sizes, max running requests, max_source_positions)
    (2048, (1, 2, 4), 4, 1500),  # Whisper at SGLang's default context (its config names none: 2048)
    (1024, (1, 2), 2, 1500),  # Whisper with --context-length 1024, below its 1500 encoder frames
    (2048, (1, 8), 8, None),  # an encoder-decoder config declaring no max_source_positions (Mllama's)
)
"""Servers whose CUDA-graph start-up batches the start-up column judges, on the capture path and on the
replay path (what a padded slot of a smaller batch replays)."""

REFUSED_OPTIONS = {
    "runner": "--runner names vLLM's model runners; SGLang has one decode path, audited on both its paths",
    "read_only": "--read-only reads vLLM's sizing from the source; SGLang's rows come only from running "
    "its code",
    "json": "--json is written for vLLM releases only (the SGLang table is printed)",
    "markdown": "--markdown is written for vLLM releases only (the SGLang table is printed)",
}
"""Audit options that do not apply to SGLang: refused in one line, never ignored."""


@dataclass
class Row:
    """One release's line of the table."""

    spec: str
    path: str
    read: str
    write: str
    read_outcome: Outcome
    write_outcome: Outcome
    detail: list[str]
    wall_s: float
    startup: str = "not run"
    startup_outcome: Outcome = Outcome.NOT_RUN


def is_sglang_audit(specs: list[str]) -> bool:
    """Whether ``audit --engine`` names SGLang (``sglang``, ``sglang==X``, ``sglang@PATH``); mixing engines in
    one audit is refused."""
    sg = [s.strip() == "sglang" or s.strip().startswith((RELEASE_PREFIX, TREE_PREFIX)) for s in specs]
    if any(sg) and not all(sg):
        raise OptionError("--engine", ", ".join(specs), "audit one engine at a time: all sglang or all vllm")
    return bool(sg) and all(sg)


def _specs(values: list[str]) -> list[str]:
    out: list[str] = []
    for value in values:
        value = value.strip()
        out += [f"{RELEASE_PREFIX}{v}" for v in AUDIT_RELEASES] if value == "sglang" else [value]
    return list(dict.fromkeys(out))


def _checked(spec: str) -> None:
    """A spec refused in one line before anything is downloaded: not a version, older than the table's
    first range, or a folder without ``sglang/``."""
    from crossattn_sizing.engine.sglang.install import sglang_version
    from crossattn_sizing.engine.sglang.releases import RANGES
    from crossattn_sizing.engine.sglang.source import sglang_tree_root

    if spec.startswith(TREE_PREFIX):
        sglang_tree_root(spec)
        return
    version = sglang_version(spec)
    if version_key(version) < version_key(RANGES[-1].first):
        first = RANGES[-1].first
        raise OptionError("--engine", spec, f"older than the first release the harness runs ({first}; "
                          "docs/engine.md, 'Which releases run')")


def _order(spec: str) -> tuple[int, tuple[int, ...]]:
    if spec.startswith(RELEASE_PREFIX):
        return 0, version_key(spec.removeprefix(RELEASE_PREFIX))
    return 1, ()


def _longest(rule: SglangAdmission | OwnAdmission) -> Triple:
    """The longest request ``rule`` (the release's own) admits: one encoder-heavy request generating all
    it may."""
    encoder = rule.max_req_input_len - 2
    request = EngineRequest(encoder, 1, rule.context_len)
    return encoder, 1, 1 + rule.output_cap(request)


def audit_release(spec: str, args: argparse.Namespace) -> Row:
    """Run one release's own code on the probes; its row."""
    from crossattn_sizing.engine.sglang.client import OwnAdmission, SglangReads, sglang_worker

    started = time.monotonic()
    worker = sglang_worker(spec, offline=args.offline, cache=args.cache_dir)
    path = worker.request("fa3_path")
    reads = SglangReads(spec)
    detail: list[str] = []
    read, read_outcome, refused = "holds", Outcome.HOLDS, False
    write, write_outcome = "holds", Outcome.HOLDS
    for context_len, kv_capacity, batch in PROBES:
        kv = SglangAdmission(context_len, kv_capacity)
        own = reads.admission(context_len, kv_capacity)  # the release's own limits pick the longest probe
        probes = [list(batch)]
        if isinstance(own, OwnAdmission):
            probes.append([_longest(own)])
        elif write_outcome == Outcome.HOLDS:  # its admission did not answer: the write side says why
            write_outcome = Outcome.FAILS if own["verdict"] == "fails" else Outcome.NOT_RUN
            write = own["verdict"]
            detail.append(f"write side, admission: {own.get('message') or own.get('reason')}")
        for probe in probes:
            written = reads.write(context_len, probe)
            if written["verdict"] != "holds" and write_outcome == Outcome.HOLDS:
                write_outcome = Outcome.FAILS if written["verdict"] == "fails" else Outcome.NOT_RUN
                write = written["verdict"]
                detail.append(f"write side: {written.get('message') or written.get('reason')}")
                detail.append(f"  check: {check_line(spec, context_len, kv.kv_capacity, probe)}")
        if read_outcome != Outcome.HOLDS:
            continue
        try:
            answer = worker.request("read", context_len=context_len, batch=[list(r) for r in batch])
        except EngineCrash as exc:
            answer = {"paths": {"eager": {"verdict": "fails", "message": f"the tree's code did not return: "
                                                                        f"{exc}"}}, "refused": False}
        refused = refused or bool(answer.get("refused"))
        for name, verdict in answer["paths"].items():
            if verdict["verdict"] == "holds" or verdict.get("refused"):  # a refusal is said below
                continue
            read_outcome = Outcome.FAILS if verdict["verdict"] == "fails" else Outcome.NOT_RUN
            read = verdict["verdict"]
            detail.append(f"read side, {name}: {verdict.get('message') or verdict.get('reason')}")
            if read_outcome == Outcome.FAILS:
                detail.append(f"  check: {check_line(spec, context_len, kv.kv_capacity, list(batch))}")
            break
    if refused:
        read = f"{read} on replay; eager refuses batches of several requests"
        detail.append("read side: the release asserts one request per batch on the FA3 eager path, so it "
                      "refuses the probes' batches there; the CUDA-graph replay path was judged on each "
                      "whole batch")
    if path.get("reason"):
        detail.append(f"FA3 text table: {path['reason']}")
    startup, startup_outcome = audit_startup(spec, detail)
    return Row(spec, path["path"], read, write, read_outcome, write_outcome, detail,
               time.monotonic() - started, startup, startup_outcome)


def audit_startup(spec: str, detail: list[str]) -> tuple[str, Outcome]:
    """The start-up column: :data:`STARTUP_PROBES` through the release's own capture code, on the capture
    and the replay path; ``"capture / replay"`` verdicts and the worst outcome, each path's first probe that
    does not hold added to ``detail`` with the release's ``file:line`` and the ``check`` line that replays
    it."""
    from crossattn_sizing.engine.sglang.client import SglangStartup
    from crossattn_sizing.engine.sglang.startup_client import PATHS, StartupServer
    from crossattn_sizing.engine.sglang.startup_client import check_line as startup_line

    judge = SglangStartup(spec)
    found: dict[str, str] = {}
    for context_len, sizes, running, source in STARTUP_PROBES:
        server = StartupServer(context_len, sizes, running, source)
        for path, verdict in judge.verdicts(server).items():
            if path in found or verdict["verdict"] == "holds":
                continue
            found[path] = verdict["verdict"]
            if verdict["verdict"] == "not run":
                detail.append(f"start-up, {path}: not run: {verdict['reason']}")
                continue
            where = f" ({verdict['where']})" if verdict.get("where") else ""
            detail.append(f"start-up, {path}: {verdict.get('headline')}{where}: {verdict['message']}")
            detail.append(f"  check: {startup_line(spec, server)}")
    verdicts = [found.get(path, "holds") for path in PATHS]
    outcome = Outcome.FAILS if "fails" in verdicts else Outcome.NOT_RUN if "not run" in verdicts else \
        Outcome.HOLDS
    return " / ".join(verdicts), outcome


def run_audit_command(spec: str, args: argparse.Namespace) -> int:
    """``audit --engine sglang...``: the family's audit (:mod:`crossattn_sizing.engine.sglang.family`);
    every ``--engine`` value is audited (``spec`` is the first that named SGLang)."""
    is_sglang_audit(args.engine)  # mixing engines in one audit is refused in one line
    return run_sglang_audit(args)


def run_sglang_audit(args: argparse.Namespace) -> int:
    """``audit --engine sglang[==X|@PATH] ...``: the release table.

    Exit 0 when every row holds, 1 when one fails, 3 when one was not run.
    """
    for option, why in REFUSED_OPTIONS.items():
        if getattr(args, option, None):
            raise OptionError(f"--{option.replace('_', '-')}", getattr(args, option), why)
    from crossattn_sizing.engine.client import close_all

    specs = sorted(_specs(args.engine), key=_order)
    for spec in specs:  # bad input before any download
        _checked(spec)
    rows: list[Row] = []
    for n, spec in enumerate(specs, 1):
        try:
            row = audit_release(spec, args)
        except ReleaseUnavailable as exc:
            if n == 1 and len(specs) == 1:
                raise
            row = Row(spec, "not run", "not run", "not run", Outcome.NOT_RUN, Outcome.NOT_RUN,
                      [str(exc)], 0.0, "not run", Outcome.NOT_RUN)
        finally:
            close_all()  # one release's worker at a time
        rows.append(row)
        print(f"crossattn-sizing: [{n}/{len(specs)}] {spec}: read {row.read}, write {row.write}, start-up "
              f"{row.startup} ({row.wall_s:.1f} s)", file=sys.stderr, flush=True)
    render(rows)
    return exit_status([o for r in rows for o in (r.read_outcome, r.write_outcome, r.startup_outcome)])


def render(rows: list[Row]) -> None:
    """The table, each row's details under it, and the first release whose read side fails."""
    head = ("release", "FA3 text table", "read side", "write side", "start-up (capture / replay)")
    cells = [(r.spec, r.path, r.read, r.write, r.startup) for r in rows]
    widths = [max(len(head[i]), *(len(c[i]) for c in cells)) for i in range(len(head))]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    print()
    for r in rows:
        for line in r.detail:
            print(f"{r.spec}: {line}")
    first = next((r for r in rows if r.read_outcome == Outcome.FAILS), None)
    print()
    if first is None:
        print("first release with the overflow: none of those audited (no read side fails)")
    else:
        print(f"first release with the overflow: {first.spec} (FA3 text table: {first.path})")
    first = next((r for r in rows if r.startup.startswith("fails")), None)
    if first is None:
        print("first release whose capture dummy is longer than its row: none of those audited")
    else:
        print(f"first release whose capture dummy is longer than its row: {first.spec}")
