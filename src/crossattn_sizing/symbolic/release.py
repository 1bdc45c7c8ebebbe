"""A vLLM release's V2 sizing proved symbolically, for the ``audit`` table's "proved for all configs" column.

The audit reads and sweeps every runner; this adds, for ModelRunner V2, the
answer of ``prove --symbolic`` on the same tree (a model replayed on the policy
the audit judged: the release executed where it ran, else its source read with
integers). Without z3 there is no answer, and the column says so.
"""

from __future__ import annotations

from typing import Any

from crossattn_sizing.audit.extract import RUNNERS, ReadError, read_runner
from crossattn_sizing.audit.modules import ModuleIndex
from crossattn_sizing.base.errors import HarnessError
from crossattn_sizing.core.policies import Policy
from crossattn_sizing.symbolic.engine import runner_paths
from crossattn_sizing.symbolic.run import prove_symbolic
from crossattn_sizing.symbolic.terms import z3_module

NO_Z3 = "z3 is not installed (the 'prove' extra)"


def v2_symbolic(index: ModuleIndex, label: str, executed: Policy | None) -> dict[str, Any]:
    """``prove --symbolic``'s result for the tree's V2 runner as JSON, or ``{"verdict": "not run", ...}``."""
    try:
        z3_module()
    except HarnessError:
        return {"verdict": "not run", "proved_for_all_configs": False, "detail": NO_Z3}
    try:
        paths_of = runner_paths(index, RUNNERS["v2"])
        concrete = executed if executed is not None else read_runner(index, "v2")
    except ReadError as exc:
        return {"verdict": "not run", "proved_for_all_configs": False, "detail": str(exc)}
    try:
        return prove_symbolic(f"vllm {label}", concrete, paths_of).to_dict()
    except z3_module().Z3Exception as exc:  # the solver refused a term the reading built: no answer
        return {"verdict": "not run", "proved_for_all_configs": False, "detail": f"z3: {exc}"}
