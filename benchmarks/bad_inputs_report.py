"""Run every bad or edge input of ``tests/bad_input_cases.py`` as a user would, and Ctrl-C each
long-running command; write ``reports/bad_inputs.md``.

Each row runs in a fresh process (``python -m crossattn_sizing ...`` or
``python -m pytest ...`` for the plugin) from the repository root, with a
folder of fixture files. The report lists the command, the exit status (and
the one expected), the first line a user reads, and three checks: no
traceback, the expected status, and nothing said to hold that did not run
(for a bad input: the word "holds" nowhere; for Ctrl-C: no policy or property
"holds" in the ``--json`` written on the way out).

    python benchmarks/bad_inputs_report.py [--out reports/bad_inputs.md] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.bad_input_cases import CASES, Case, command_line, first_line, make_fixtures, run_isolated  # noqa: E402
from tests.processes import NEVER_FINISHES, cli, running  # noqa: E402

REGENERATE = "CROSSATTN_PROFILE=ci TRITON_INTERPRET=1 python benchmarks/bad_inputs_report.py"


@dataclass
class Row:
    command: str
    shown: str  # the command line as written in the report
    expected: int
    status: int
    first: str
    traceback: bool
    holds_said: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status == self.expected and not self.traceback and not self.holds_said


def shown_args(argv: list[str], d: Path) -> str:
    text = " ".join(a if a and " " not in a else json.dumps(a) for a in argv).replace(str(d), "FIXTURES")
    return text if len(text) <= 110 else text[:107] + "..."


def run_case(case: Case, d: Path) -> Row:
    start = time.monotonic()
    code, out, err = run_isolated(case, d)
    said_holds = case.status in (2, 4) and "holds" in out + err  # bad input: nothing ran
    name = "pytest plugin" if case.command == "pytest" else case.command
    argv = command_line(case, d)[3:] if case.command != "pytest" else ["pytest", *case.argv(d)[1:]]
    env = " ".join(f"{k}={v}" for k, v in case.environ(d).items())
    shown = (env + " " if env else "") + shown_args(argv, d)
    shown += {"full": " > /dev/full", "closed": " | (reader closed)"}.get(case.stdout, "")
    first = first_line(out, err).replace(str(d), "FIXTURES")
    return Row(name, shown.replace(str(d), "FIXTURES"), case.status, code, first,
               "Traceback" in out + err, said_holds, time.monotonic() - start)  # fmt: skip


@dataclass
class Interrupt:
    """A long run, Ctrl-C pressed once (or ``presses`` times) after a progress line shows it is under way."""

    name: str
    args: list[str]
    ready: Callable[[str], bool]
    presses: int = 1
    signum: int = signal.SIGINT  # the signal sent (last): SIGTERM and SIGHUP end a run as Ctrl-C does


def run_interrupt(spec: Interrupt, d: Path) -> Row:
    out_json = d / f"interrupt-{spec.name.replace(' ', '-')}.json"
    argv = [a.replace("{json}", str(out_json)).replace("{d}", str(d)) for a in spec.args]
    start = time.monotonic()
    with running(cli(*argv)) as child:
        child.wait_for(spec.ready)
        for _ in range(spec.presses - 1):
            child.proc.send_signal(signal.SIGINT)
        result = child.interrupt(signum=spec.signum)
    holds = False
    if out_json.is_file():
        data = json.loads(out_json.read_text())
        for policy in data.get("policies", []):
            holds |= policy.get("verdict") == "holds"
            holds |= any(p.get("outcome") == "holds" for p in policy.get("properties", []))
        fuzzed = data.get("properties", [])  # fuzz: mrv2 never finished a property before Ctrl-C
        holds |= any(p.get("outcome") == "holds" and p.get("policy") == "mrv2" for p in fuzzed)
    sent = f"Ctrl-C x{spec.presses}" if spec.signum == signal.SIGINT else signal.Signals(spec.signum).name
    shown = f"{shown_args(argv, d)}  + {sent}"
    traceback = "Traceback" in result.stderr.split("Exception ignored")[0]  # not one Python ignored in gc
    first = first_line(result.stdout, result.stderr).replace(str(d), "FIXTURES")
    seconds = time.monotonic() - start
    return Row(spec.name.split()[0], shown, 130, result.returncode, first, traceback, holds, seconds)


LONG_VERIFY = ["verify", "--policy", "mrv2", "-k", "test_capacity", "--max-examples", NEVER_FINISHES,
               "--json", "{json}"]  # fmt: skip
VERIFY_STARTED = lambda line: line.startswith("verify: policy mrv2")  # noqa: E731

INTERRUPTS = [
    Interrupt("verify", ["verify", "--policy", "mrv2", "--policy", "mrv2-prefix", "-k", "test_capacity",
                         "--max-examples", NEVER_FINISHES, "--json", "{json}"],
              lambda line: line.startswith("verify: policy mrv2")),
    Interrupt("verify x3", ["verify", "--policy", "mrv2", "-k", "test_capacity",
                            "--max-examples", NEVER_FINISHES, "--json", "{json}"],
              lambda line: line.startswith("verify: policy mrv2"), presses=3),
    *(Interrupt(f"verify {signal.Signals(signum).name}", LONG_VERIFY, VERIFY_STARTED, signum=signum)
      for signum in (signal.SIGTERM, signal.SIGHUP)),
    Interrupt("fuzz", ["fuzz", "--minutes", "600", "--policy", "mrv2-prefix", "--policy", "mrv2",
                       "--regressions", "{d}/fuzz-regressions", "--db", "{d}/fuzz-db", "-k", "test_capacity",
                       "--examples-per-round", NEVER_FINISHES, "--json", "{json}"],
              lambda line: line.strip() == "fuzz: round 1: policy mrv2"),
    Interrupt("prove", ["prove", "--policy", "tests.broken_policies:floor_div", "--no-progress",
                        "--json", "{json}"],
              lambda line: line.startswith("note: policy")),
]  # fmt: skip


def render(rows: list[Row], seconds: float) -> str:
    by_command = Counter(r.command for r in rows)
    bad = [r for r in rows if not r.ok]
    lines = [
        f"Regenerate: `{REGENERATE}` (from the repository root; this run took {seconds / 60:.1f} min)",
        "",
        "# Bad and edge inputs: what every command answers",
        "",
        f"{len(rows)} command lines across every command and the pytest plugin "
        f"({', '.join(f'{c} {n}' for c, n in sorted(by_command.items()))}), each run in a fresh process "
        "as a user would run it. The rows are `tests/bad_input_cases.py` (which `tests/test_bad_inputs.py` "
        "also asserts) and a Ctrl-C after each long run has started.",
        "",
        f"- expected exit status: {sum(r.status == r.expected for r in rows)} of {len(rows)}",
        f"- tracebacks: {sum(r.traceback for r in rows)}",
        f"- \"holds\" said for something that did not run: {sum(r.holds_said for r in rows)}",
        f"- rows with any problem: {len(bad)}" + (": " + "; ".join(r.shown for r in bad) if bad else ""),
        "",
        "Exit statuses: 2 bad input (one line naming the option or field and the rule; also an output, "
        "standard output included, that cannot be written: `> /dev/full` and `| closed pipe` rows), 4 "
        "pytest's usage error (the plugin), 0/1 edge inputs that are valid (holds / fails), 130 Ctrl-C, "
        "SIGTERM or SIGHUP. `FIXTURES` is the folder `make_fixtures` fills (non-UTF-8 and deeply nested "
        "JSON, decoder-only configs, a malformed regression file, a file where a folder is expected, a "
        "FIFO, a link to /dev/zero, a symbolic link loop). The first line is the error line when there "
        "is one, else the first line of the report.",
        "",
        "| # | command | command line | exit (expected) | first line of output | ok |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for i, r in enumerate(rows, 1):
        first = r.first.replace("|", "\\|")
        first = first if len(first) <= 160 else first[:157] + "..."
        line = r.shown.replace("|", "\\|")
        lines.append(f"| {i} | {r.command} | `{line}` | {r.status} ({r.expected}) | {first} | "
                     f"{'yes' if r.ok else 'NO'} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bad_inputs.md")
    parser.add_argument("--jobs", type=int, default=2, help="rows run side by side (default 2)")
    args = parser.parse_args()
    os.environ.setdefault("CROSSATTN_PROFILE", "ci")
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        d = make_fixtures(Path(tmp) / "fixtures")
        with ThreadPoolExecutor(args.jobs) as pool:
            rows = list(pool.map(lambda c: run_case(c, d), CASES))
        rows += [run_interrupt(spec, d) for spec in INTERRUPTS]
    args.out.write_text(render(rows, time.monotonic() - start))
    bad = [r for r in rows if not r.ok]
    print(f"{len(rows)} rows, {len(bad)} with a problem; wrote {args.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
