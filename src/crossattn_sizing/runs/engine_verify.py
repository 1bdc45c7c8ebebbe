"""``verify --engine sglang==X``: the read- and write-side properties on an SGLang tree, as a verdict table.

The properties are ``properties/test_read_coverage.py``'s: the read side with
``--read-builder X`` (the release's own ``FlashAttentionBackend`` metadata,
eager and CUDA-graph replay, over a guarded ``req_to_token``), the write side
on the same draws under SGLang's admission rule. They run through the suite
runner verify uses for vLLM policies (:func:`crossattn_sizing.runs.suite.run_suite`),
so a verdict means what it means there: "holds" only when the property ran
examples and held, a failure comes with its shrunk batch and the ``check``
line that replays it alone.
"""

from __future__ import annotations

import argparse

from crossattn_sizing.base.errors import OptionError
from crossattn_sizing.base.outcome import Outcome, exit_status
from crossattn_sizing.engine.sglang.releases import KNOWN_READ_FAILURES
from crossattn_sizing.engine.sglang.source import is_sglang_spec

PROPERTY_FILE = "properties/test_read_coverage.py"
EXPECTED = {
    "test_gathers_stay_in_row_and_own_columns": "read side: every gathered column in its row",
    "test_admitted_requests_fit_their_shared_row": "write side: admitted requests fit their row",
}




def expected_to_hold(spec: str, name: str) -> bool:
    """Whether a failure of property ``name`` on ``spec`` is a regression (exit 1) or the known finding."""
    return not (name == "test_gathers_stay_in_row_and_own_columns" and spec in KNOWN_READ_FAILURES)


def run_engine_verify(args: argparse.Namespace) -> int:
    """Run the two properties on ``args.engine``; the status as verify's: 0 what is expected to hold holds
    (the known failure caught), 1 something expected to hold fails, 3 something did not run."""
    from crossattn_sizing.engine.sglang.client import sglang_worker
    from crossattn_sizing.runs.suite import run_suite

    spec = args.engine.strip()
    if not is_sglang_spec(spec):
        raise OptionError("--engine", spec, "verify takes sglang==X or sglang@PATH (vLLM: --policy vllm==X)")
    worker = sglang_worker(spec)  # resolves, downloads and starts it now: bad input before any property
    note = getattr(worker.release, "note", "")
    print(f"verify --engine {spec}: SGLang's own decode metadata builder (docs/engine.md)")
    if note:
        print(f"note: {note}")
    if worker.ready.get("range"):
        print(f"release: {worker.ready['range']} (engine/sglang/releases.py: the steps run as its code)")
    if worker.request("fa3_path").get("path") == "slice":  # observed on its own eager path, not looked up
        print("note: this release takes a slice and asserts one request per batch (FA3 eager path): the read "
              "side judges each drawn batch as the engine runs it, every request in a batch of its own")
    results, _code = run_suite("mrv2", profile=args.profile, seed=args.seed, only=[PROPERTY_FILE],
                               extra_args=["--read-builder", spec])
    rows = {r.name.split("::")[-1]: r for r in results}
    counted: list[Outcome] = []
    width = max(len(v) for v in EXPECTED.values())
    print(f"{'property':<{width}}  verdict   examples  expected")
    for name, label in EXPECTED.items():
        r = rows.get(name)
        outcome = r.outcome if r is not None else Outcome.NOT_RUN
        holds_expected = expected_to_hold(spec, name)
        expected = "holds" if holds_expected else "fails (known)"
        print(f"{label:<{width}}  {outcome.value:<8}  {r.examples if r else 0:<8}  {expected}")
        # Counted as verify counts a policy: an expected failure is caught (holds); unjudged is not run.
        if not outcome.judged:
            counted.append(Outcome.NOT_RUN)
        else:
            counted.append(Outcome.FAILS if outcome == Outcome.FAILS and holds_expected else Outcome.HOLDS)
        if r is not None and outcome == Outcome.FAILS:
            for line in r.diagnosis.splitlines():
                print(f"    {line}")
            print(f"    reproduce: {r.reproduce}")
        elif r is not None and outcome != Outcome.HOLDS and r.reason:
            print(f"    {r.reason}")
    return exit_status(counted)
