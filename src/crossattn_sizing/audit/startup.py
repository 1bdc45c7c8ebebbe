"""The audit's start-up columns: each release's own start-up batches, for ModelRunner V2 and V1.

V2's batches run as the release wrote them (``_dummy_run``, ``make_dummy``,
``get_dummy_slot_mappings``, ``max_encoder_len``) in the worker that executes
its sizing, over the grid of :mod:`crossattn_sizing.findings.startup`. V1's
``_dummy_run`` (``vllm/v1/worker/gpu_model_runner.py``) is not executed by
the adapter: that method reads dozens of the runner's attributes and its
input batch, none stood in for, so its cell is "not run" with that reason
(absent from 0.34.0, which has no V1). Neither column is a sizing runner, so
neither takes part in the sweep; the audit's exit status counts a column that
ran (holds or fails), and prints one that did not, with why.
"""

from __future__ import annotations

from typing import Any

from crossattn_sizing.audit.verdicts import RunnerVerdict
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.findings.startup import NAME, startup_row

V1_FILE = "vllm/v1/worker/gpu_model_runner.py"
COLUMNS = {"startup-v2": "Start-up batches V2", "startup-v1": "Start-up batches V1"}
"""The audit's start-up columns (``--runner startup`` asks for both) and their titles."""
V1_NOT_RUN = (
    f"{V1_FILE} GPUModelRunner._dummy_run is not executed by the adapter (it reads dozens of the runner's "
    "attributes and its InputBatch; none stood in for); its dummy seq_lens equal the query length "
    "(docs/spec.md, start-up batches)"
)


def startup_verdicts(
    label: str, spec: str | None, policy: Any, why: str, has_v1: bool
) -> list[RunnerVerdict]:
    """The two start-up cells of one release: V2 through ``policy`` (the executed V2 policy, or None and
    ``why``), V1 not run (or absent)."""
    title = COLUMNS["startup-v2"]
    if policy is None or spec is None:
        v2 = RunnerVerdict(label, "startup-v2", title, Outcome.NOT_RUN,
                           reason=f"not executed: {why or 'read-only, or a package directory'}")  # fmt: skip
    else:
        row = startup_row(policy, spec)
        where = f"executed: {NAME} (vLLM {getattr(policy, 'version', '?')})"
        reason = row.diagnosis or row.reason or None
        if row.reproduce:
            reason = f"{reason}\n  replay: {row.reproduce}"
        v2 = RunnerVerdict(label, "startup-v2", title, Outcome(row.outcome), where=where, reason=reason,
                           configs_checked=row.examples, configs_failing=int(row.outcome == Outcome.FAILS),
                           path="executed")  # fmt: skip
    v1 = RunnerVerdict(label, "startup-v1", COLUMNS["startup-v1"],
                       Outcome.NOT_RUN if has_v1 else Outcome.ABSENT,
                       reason=V1_NOT_RUN if has_v1 else "no ModelRunner V1 in this release")  # fmt: skip
    return [v2, v1]
