"""Mutation score of the sizing and slot-mapping modules against the property suite.

Why: a property that passes on the code under test says little until it is
shown to fail on code that is wrong. ``tests/meta/test_meta_capacity.py`` does that
for hand-written broken policies; mutation testing does it mechanically, for
every operator, constant and call in the modules the properties are about.

The tool is mutmut 3 (it copies the source into ``mutants/`` and switches
mutants on per test run, so the working tree is never modified and concurrent
test runs are unaffected). mutmut reads its settings only from ``setup.cfg`` or
``pyproject.toml`` in the folder it runs in, and this repository keeps neither
for it, so the script runs mutmut in a scratch copy (``.cache/mutation/``, git
ignored) holding ``src/crossattn_sizing``, ``tests/``, ``properties/``,
``reference/`` (the oracle the slot-mapping property compares with),
``pyproject.toml`` and a generated ``setup.cfg`` built from the constants below.

Run (writes reports/mutation.md and prints the summary):

    CROSSATTN_PROFILE=ci .venv/bin/python benchmarks/mutation_report.py

``--report-only`` rebuilds the report from the last run's results without
running mutmut again (for editing the equivalence notes). ``--rerun-survivors``
keeps the last run's source snapshot and verdicts, refreshes the test files in
the scratch copy and re-runs only the mutants that were not killed: adding a
test cannot revive a killed mutant, so this is what a new killer test changes
(the test selection must be the same as in the full run, else mutmut itself
discards every verdict and runs them all). Surviving mutants
that are equivalent are explained in :data:`EQUIVALENT`; any other survivor is
listed as UNEXPLAINED, which is a gap in the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / ".cache" / "mutation"
REPORT = ROOT / "reports" / "mutation.md"
COMMAND = "CROSSATTN_PROFILE=ci .venv/bin/python benchmarks/mutation_report.py"

MODULES = (
    "src/crossattn_sizing/core/policies.py",
    "src/crossattn_sizing/core/admission.py",
    "src/crossattn_sizing/core/capacity.py",
    "src/crossattn_sizing/impl/slot_mapping.py",
)
"""Modules mutated: the sizing rule, the admission model, the invariant checks, slot mapping."""

TESTS = (
    "properties/test_admission.py",
    "properties/test_capacity.py",
    "properties/test_capacity_extra.py",
    "properties/test_slot_mapping.py",
    "properties/test_slots.py",
    "tests/meta/test_meta_admission.py",
    "tests/meta/test_meta_capacity.py",
    "tests/test_capacity.py",
    "tests/test_policies.py",
    "tests/test_prove.py",
    "tests/test_slot_mapping.py",
    "tests/test_helpers_and_diagnoses.py",
)
"""The test selection: the property suite, its meta-tests and the unit tests of these modules.

Files that do not exist (yet) are skipped. CLI tests are left out on purpose:
they start subprocesses, which import the unmutated package and so can never
kill a mutant.
"""

ENV = {
    "CROSSATTN_PROFILE": "ci",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TRITON_INTERPRET": "1",
}

DESELECT = ("tests/meta/test_meta_capacity.py::test_prefix_sizing_is_caught_with_the_nemotron_shape",)
"""Tests left out of the mutation run: they assert what shrinking yields, and shrinking is off."""

CONFTEST = """\
# Written by benchmarks/mutation_report.py into its scratch copy only.
# The ci profile's generation budget, derandomized, without the shrink phase: a mutant is
# killed by the first failing example, and shrinking it (most of the suite's time on a
# failing meta-test) changes nothing but the report. The meta-tests read this profile too.
import os

from hypothesis import HealthCheck, Phase, settings

settings.register_profile(
    "ci",
    max_examples=int(os.environ["CROSSATTN_MUTATION_EXAMPLES"]),
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
    suppress_health_check=[HealthCheck.too_slow],
)
"""

KILLED = {"killed", "timeout", "caught by type check", "segfault"}
"""Outcomes counted as killed (a mutant that hangs or crashes the tests is detected)."""


@dataclass(frozen=True)
class Equivalent:
    """A surviving mutant no test can kill, matched on its function and changed lines."""

    module: str  # e.g. "policies"
    function: str  # mutmut's function key, e.g. "x_cdiv" or "xǁSlotLayoutǁ__post_init__"
    removed: str  # the original line, stripped
    added: str  # the mutated line, stripped
    reason: str


_INT_ARANGE = (
    "`torch.arange` of an integer count is int64 by default, so `dtype=torch.int64` only "
    "states the default; removing it or passing `dtype=None` changes nothing."
)
_TOKEN_BATCH = "batch = torch.arange(counts.numel(), dtype=torch.int64, device=query_start_loc.device)"
_LOCAL_J = "j = torch.arange(local_len, dtype=torch.int64, device=device)"

EQUIVALENT: tuple[Equivalent, ...] = (
    Equivalent(
        "policies",
        "x_alignment_multiple",
        "return 128 // block_size if block_size <= 128 else 1",
        "return 128 // block_size if block_size < 128 else 1",
        "At `block_size == 128`, the only value where `<=` and `<` differ, both branches give 1 "
        "(`128 // 128 == 1`).",
    ),
    Equivalent(
        "capacity",
        "x_violations",
        "continue",
        "break",
        "The `continue` skips a request whose `request_tokens` is None, which happens only for a mamba "
        "group and then for every request of it (the answer depends on the group's kind alone), so "
        "`break`, which skips the group's remaining requests, skips exactly the same ones.",
    ),
    Equivalent(
        "capacity",
        "x_overflows_negated",
        "fail = (neg_tokens // kbs_c) < neg_width",
        "fail = (neg_tokens / kbs_c) < neg_width",
        "A true quotient differs from the floor only in the coverage term, and that term never "
        "decides `fail` (see the next entry: the allocation term implies it); the float form could "
        "only add a failure by rounding, and below 2**52 (tokens times positions per entry; the "
        "harness's domain ends at 2**21 tokens) `-n / d < -W` is exactly `cdiv(n, d) > W`.",
    ),
    Equivalent(
        "capacity",
        "x_overflows_negated",
        "fail |= received < neg_width",
        "fail = received < neg_width",
        "Whenever the kernel block divides the block (every valid config: `RunnerConfig` refuses "
        "others, and every part of `prove`'s domain), a request receives `cdiv(n, bs*C) * (bs/kbs)` "
        "entries, never fewer than the `cdiv(n, kbs*C)` it needs; so a coverage failure is an "
        "allocation failure too, and the allocation term alone decides `fail`.",
    ),
    Equivalent(
        "slot_mapping",
        "x_token_requests",
        "counts = (query_start_loc[1:] - query_start_loc[:-1]).to(torch.int64)",
        "counts = (query_start_loc[1:] - query_start_loc[:-1]).to(None)",
        "`counts` is only the `repeats` argument of `repeat_interleave`, which takes int32 as well as "
        "int64; the result's dtype is that of `batch` (int64) either way.",
    ),
    Equivalent(
        "slot_mapping",
        "x_token_requests",
        _TOKEN_BATCH,
        _TOKEN_BATCH.replace("dtype=torch.int64", "dtype=None"),
        _INT_ARANGE,
    ),
    Equivalent(
        "slot_mapping",
        "x_token_requests",
        _TOKEN_BATCH,
        _TOKEN_BATCH.replace("dtype=torch.int64, ", ""),
        _INT_ARANGE,
    ),
    Equivalent(
        "slot_mapping",
        "x_token_requests",
        "return torch.repeat_interleave(batch, counts, output_size=num_tokens)",
        "return torch.repeat_interleave(counts, output_size=num_tokens)",
        "`torch.repeat_interleave(repeats)` is defined as "
        "`torch.repeat_interleave(torch.arange(len(repeats)), repeats)`, which is exactly `batch` "
        "repeated by `counts` (same values, int64 like `counts`, same device).",
    ),
    Equivalent(
        "slot_mapping",
        "x_global_positions",
        _LOCAL_J,
        _LOCAL_J.replace("dtype=torch.int64", "dtype=None"),
        _INT_ARANGE,
    ),
    Equivalent(
        "slot_mapping",
        "x_global_positions",
        _LOCAL_J,
        _LOCAL_J.replace("dtype=torch.int64, ", ""),
        _INT_ARANGE,
    ),
    Equivalent(
        "slot_mapping",
        "x_torch_slot_mapping",
        "rows = req_rows.to(torch.int64)[batch]",
        "rows = req_rows.to(None)[batch]",
        "Equivalent for every table of fewer than 2**31 entries: int32 row numbers times the row "
        "stride then stay in int32 range, and adding the int64 column promotes the index to int64. "
        "Only a flat table of 2**31 int32 entries (8 GiB) could tell; no test allocates that.",
    ),
)
"""Survivors equivalent to the original (the last one: for any table a test can allocate)."""


# ---------------------------------------------------------------- running mutmut


def existing(paths: tuple[str, ...]) -> list[str]:
    return [p for p in paths if (ROOT / p).is_file()]


def setup_cfg(modules: list[str], tests: list[str]) -> str:
    """The ``[mutmut]`` section for the scratch copy."""

    def lines(values: list[str]) -> str:
        return "".join(f"\n    {v}" for v in values)

    pytest_args = ["-p", "no:cacheprovider", *(a for t in DESELECT for a in ("--deselect", t))]

    return (
        "[mutmut]\n"
        "source_paths = src\n"
        f"only_mutate ={lines(modules)}\n"
        f"pytest_add_cli_args_test_selection ={lines(tests)}\n"
        # One argument per line: mutmut passes a one-line value to pytest as a single argument.
        f"pytest_add_cli_args ={lines(pytest_args)}\n"
        "also_copy =\n    properties/\n    reference/\n    conftest.py\n"
        # torch runs in the slot-mapping property; a torch-initialised parent is not fork-safe.
        "process_isolation = forkserver\n"
    )


def prepare(modules: list[str], tests: list[str]) -> None:
    """A fresh scratch copy: mutmut resumes from an old ``mutants/``, which would hide source edits."""
    if SCRATCH.exists():
        shutil.rmtree(SCRATCH)
    SCRATCH.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    shutil.copytree(ROOT / "src" / "crossattn_sizing", SCRATCH / "src" / "crossattn_sizing", ignore=ignore)
    for folder in ("tests", "properties", "reference"):
        shutil.copytree(ROOT / folder, SCRATCH / folder, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", SCRATCH / "pyproject.toml")
    (SCRATCH / "setup.cfg").write_text(setup_cfg(modules, tests))
    (SCRATCH / "conftest.py").write_text(CONFTEST)


def refresh_tests(tests: list[str]) -> None:
    """Copy the current test files over the scratch copy's (the source snapshot is kept)."""
    expected = setup_cfg(json.loads((SCRATCH / "run.json").read_text())["modules"], tests)
    if (SCRATCH / "setup.cfg").read_text() != expected:
        raise SystemExit("the test selection changed since the full run: run without --rerun-survivors")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for folder in ("tests", "properties", "reference"):
        shutil.copytree(ROOT / folder, SCRATCH / folder, ignore=ignore, dirs_exist_ok=True)


def mutmut_exe() -> str:
    """The ``mutmut`` script of this interpreter's environment (``python -m mutmut`` re-imports itself)."""
    local = Path(sys.executable).with_name("mutmut")
    found = str(local) if local.exists() else shutil.which("mutmut")
    if not found:
        raise SystemExit("mutmut is not installed: pip install 'mutmut>=3.8,<4'")
    return found


def run_mutmut(
    max_children: int, examples: int, names: list[str] | None = None, log_name: str = "mutmut.log"
) -> float:
    """Run mutmut in the scratch copy (all mutants, or ``names``); its output goes to a log there."""
    env = dict(os.environ, **ENV, CROSSATTN_MUTATION_EXAMPLES=str(examples))
    log = SCRATCH / log_name
    start = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(
            [mutmut_exe(), "run", "--max-children", str(max_children), *(names or [])],
            cwd=SCRATCH,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"mutmut failed (exit {done.returncode}); end of {log}:\n{tail}")
    return seconds


# ---------------------------------------------------------------- reading results


@dataclass
class Mutant:
    name: str
    module: str
    function: str
    status: str
    diff: str = ""
    reason: str = ""

    @property
    def changed(self) -> tuple[str, str]:
        """The removed and added lines of the diff, stripped and joined with " / "."""
        lines = self.diff.splitlines()[2:]  # past the ---/+++ header
        removed = [ln[1:].strip() for ln in lines if ln.startswith("-")]
        added = [ln[1:].strip() for ln in lines if ln.startswith("+")]
        return " / ".join(removed), " / ".join(added)


_NAME = re.compile(r"crossattn_sizing\.(?P<module>\w+)\.(?P<function>.+)__mutmut_\d+$")


def status_of(code: int | None) -> str:
    from mutmut.stats import status_by_exit_code  # mutmut's own table, so new codes read right

    return str(status_by_exit_code[code])


def load_mutants(modules: list[str]) -> list[Mutant]:
    out = []
    for module_path in modules:
        meta = SCRATCH / "mutants" / f"{module_path}.meta"
        if not meta.exists():
            continue
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        for name, code in codes.items():
            match = _NAME.match(name)
            if match is None:
                raise SystemExit(f"unexpected mutant name {name!r}")
            out.append(Mutant(name, match["module"], match["function"], status_of(code)))
    return out


def attach_diffs(mutants: list[Mutant]) -> None:
    """``mutmut show`` for every mutant not killed (their diffs go in the report)."""
    for m in mutants:
        if m.status in KILLED:
            continue
        done = subprocess.run(
            [mutmut_exe(), "show", m.name], cwd=SCRATCH, capture_output=True, text=True, check=False
        )
        lines = done.stdout.splitlines()
        m.diff = "\n".join(ln for ln in lines if not ln.startswith("# "))
        for eq in EQUIVALENT:
            if (eq.module, eq.function, eq.removed, eq.added) == (m.module, m.function, *m.changed):
                m.reason = eq.reason
                break


# ---------------------------------------------------------------- the report


def render(
    mutants: list[Mutant],
    modules: list[str],
    tests: list[str],
    seconds: float,
    rerun: tuple[int, float],
    examples: int,
    timeouts_rerun: int | None = None,
) -> str:
    per_module: dict[str, Counter[str]] = {}
    for m in mutants:
        per_module.setdefault(m.module, Counter())[m.status] += 1
    rows = []
    total: Counter[str] = Counter()
    for module in [Path(p).stem for p in modules]:
        counts = per_module.get(module, Counter())
        total.update(counts)
        rows.append((module, counts))
    rows.append(("**total**", total))

    def score(c: Counter[str]) -> str:
        n = sum(c.values())
        killed = sum(v for k, v in c.items() if k in KILLED)
        return f"{100 * killed / n:.1f}%" if n else "-"

    def killed(c: Counter[str]) -> int:
        return sum(v for k, v in c.items() if k in KILLED)

    def other(c: Counter[str]) -> int:
        return sum(v for k, v in c.items() if k not in KILLED | {"survived", "no tests"})

    survivors = [m for m in mutants if m.status not in KILLED]
    equivalent = [m for m in survivors if m.reason]
    unexplained = [m for m in survivors if not m.reason]
    out = [
        "# Mutation score",
        "",
        f"Regenerate: `{COMMAND}` (or `nox -s mutation`; about 15 min on 2 cores)",
        "",
        "Tool: mutmut "
        + _mutmut_version()
        + ", run in a scratch copy (`.cache/mutation/`). Hypothesis: the `ci` profile "
        f"(derandomized, no database) with {examples} examples per property"
        + (" (the ci budget)" if examples == 200 else " (fewer than ci's 200)")
        + " and **shrinking off**: a mutant dies at its first failing example, and shrinking, most "
        "of a failing meta-test's time, would only make the report slower. So "
        + ", ".join(f"`{t}`" for t in DESELECT)
        + " (which asserts what shrinking yields) is left out; the pre-fix sizing it checks is still "
        "pinned by `tests/test_policies.py` and compared with `prove`'s independent numpy form in "
        "`tests/test_prove.py`."
        + f" Wall time of the full run: {seconds / 60:.1f} min (2-core machine, shared)."
        + (
            f" Survivors were then re-run against the current tests ({rerun[0]} time(s), last one "
            f"{rerun[1] / 60:.1f} min, `--rerun-survivors`); killed verdicts are from the full run."
            if rerun[0]
            else ""
        ),
        "",
        "Mutated modules: " + ", ".join(f"`{p}`" for p in modules) + ".",
        "",
        "Tests run against each mutant (only those that call the mutated function): "
        + ", ".join(f"`{t}`" for t in tests)
        + ".",
        "",
        "| module | mutants | killed | survived | no tests | other | score |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *(
            f"| {name} | {sum(c.values())} | {killed(c)} | {c['survived']} | {c['no tests']} | {other(c)} "
            f"| {score(c)} |"
            for name, c in rows
        ),
        "",
        "`killed` counts mutants a test failed on (timeouts included); `no tests` are mutants in a",
        "function no selected test calls. The score is killed / mutants.",
        "",
        f"Survivors: {len(survivors)} ({len(equivalent)} equivalent, {len(unexplained)} unexplained). "
        f"Over the {len(mutants) - len(equivalent)} non-equivalent mutants the score is "
        f"{killed(total)}/{len(mutants) - len(equivalent)} "
        f"({100 * killed(total) / max(1, len(mutants) - len(equivalent)):.1f}%); "
        f"{total['timeout']} of the killed timed out"
        + (
            f" (after re-running the {timeouts_rerun} that timed out in the full run on their own, "
            "`--rerun-timeouts`: a load spike must not count as a kill)."
            if timeouts_rerun is not None
            else "."
        ),
        "",
    ]
    if unexplained:
        out += ["## Unexplained survivors (gaps in the tests)", ""]
        for m in unexplained:
            out += [f"### `{m.name}` ({m.status})", "", "```diff", m.diff, "```", ""]
    if equivalent:
        out += ["## Equivalent mutants", ""]
        for m in equivalent:
            out += [f"### `{m.name}` ({m.status})", "", m.reason, "", "```diff", m.diff, "```", ""]
    return "\n".join(out).rstrip() + "\n"


def _mutmut_version() -> str:
    from importlib.metadata import version

    return version("mutmut")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2, help="parallel mutants")
    parser.add_argument(
        "--max-examples", type=int, default=200, help="examples per property (ci: 200); shrinking is off"
    )
    parser.add_argument("--report-only", action="store_true", help="rebuild the report from the last run")
    parser.add_argument(
        "--rerun-survivors",
        action="store_true",
        help="re-run only the last run's surviving mutants against the current tests",
    )
    parser.add_argument(
        "--rerun-timeouts",
        action="store_true",
        help="re-run only the last run's timed-out mutants (a load spike, not the mutant, can time a test "
        "out; a kill should not rest on that)",
    )
    parser.add_argument("--report", type=Path, default=REPORT)
    args = parser.parse_args()

    record = SCRATCH / "run.json"
    if args.rerun_survivors or args.rerun_timeouts:
        flag = "--rerun-timeouts" if args.rerun_timeouts else "--rerun-survivors"
        if not record.exists():
            raise SystemExit(f"no previous run in {SCRATCH}: run without {flag} first")
        run = json.loads(record.read_text())
        refresh_tests(run["tests"])
        mutants = load_mutants(run["modules"])
        if args.rerun_timeouts:
            names = [m.name for m in mutants if m.status == "timeout"]
            run["timeouts_rerun"] = len(names)
        else:
            names = [m.name for m in mutants if m.status not in KILLED]
        what = "timed-out" if args.rerun_timeouts else "surviving"
        print(f"re-running {len(names)} {what} mutants in {SCRATCH}", flush=True)
        if names and args.rerun_timeouts:
            log = "mutmut-rerun.log"
            run["timeouts_seconds"] = run_mutmut(args.max_children, run["examples"], names, log)
        elif names:
            run["rerun_seconds"] = run_mutmut(args.max_children, run["examples"], names, "mutmut-rerun.log")
            run["reruns"] = run.get("reruns", 0) + 1
        record.write_text(json.dumps(run))
    elif not args.report_only:
        modules, tests = existing(MODULES), existing(TESTS)
        prepare(modules, tests)
        print(f"mutmut in {SCRATCH}: {len(modules)} modules, {len(tests)} test files", flush=True)
        seconds = run_mutmut(args.max_children, args.max_examples)
        record.write_text(
            json.dumps(
                {"modules": modules, "tests": tests, "seconds": seconds, "examples": args.max_examples}
            )
        )
    elif not record.exists():
        raise SystemExit(f"no previous run in {SCRATCH}: run without --report-only first")
    run = json.loads(record.read_text())
    modules, tests, seconds, examples = run["modules"], run["tests"], run["seconds"], run["examples"]
    mutants = load_mutants(modules)
    rerun = (run.get("reruns", 0), run.get("rerun_seconds", 0.0))
    if not mutants:
        raise SystemExit(f"no mutmut results under {SCRATCH / 'mutants'}")
    attach_diffs(mutants)
    text = render(mutants, modules, tests, seconds, rerun, examples, run.get("timeouts_rerun"))
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(text)
    print("\n".join(line for line in text.splitlines() if line.startswith(("| ", "Survivors:"))))
    print(f"wrote {args.report}")


if __name__ == "__main__":
    main()
