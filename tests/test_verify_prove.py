"""verify's prove row: the exhaustive edge-domain verdict beside the sampled properties.

A policy that fails anywhere in the bounded domain must never be shown as
holding, even where the properties selected could not see it.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from crossattn_sizing.base.errors import PolicyCallError
from crossattn_sizing.commands.cli import main
from crossattn_sizing.core.policies import BUILTIN_POLICIES, RunnerConfig
from crossattn_sizing.prove.edges import edge_domain
from crossattn_sizing.prove.verify_row import NAME, prove_property
from crossattn_sizing.runs.verify_run import wants_prove
from tests.broken_policies import BROKEN


def test_fixed_sizing_holds_on_every_config_of_the_edge_domain() -> None:
    row = prove_property(BUILTIN_POLICIES["mrv2"], "mrv2")
    assert row.name == NAME and row.outcome == "holds"
    assert row.examples == sum(p.size for p in edge_domain())


def test_a_boundary_slip_fails_with_a_reproduce_command_that_check_confirms(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = "tests.broken_policies:aligned_ceil_off_by_one"
    parts = edge_domain(block_sizes=(48,), dcp_sizes=(2,))
    row = prove_property(BROKEN["aligned_ceil_off_by_one"], spec, parts)
    assert row.outcome == "fails"
    assert "configs of the edge domain" in row.diagnosis
    argv = shlex.split(row.reproduce)
    assert argv[0] == "crossattn-sizing"
    assert main(argv[1:]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_a_policy_that_raises_somewhere_is_bad_input_naming_the_config() -> None:
    """Neither holds nor a verdict: the row could not be judged, as inside the property suite."""

    def breaks_on_long_contexts(config: RunnerConfig) -> tuple[int, ...]:
        if config.max_model_len > 1 << 20:
            raise ValueError("too long")
        return BUILTIN_POLICIES["mrv2"](config)

    said = r"ValueError: too long .*M=1048577.*replay: crossattn-sizing check"
    with pytest.raises(PolicyCallError, match=said):
        prove_property(breaks_on_long_contexts, "user:breaks")


def test_verify_never_shows_a_policy_as_holding_when_prove_finds_a_counterexample(tmp_path: Path) -> None:
    """The slot-mapping property does not read the sizing policy; the prove row still fails it.

    ``-k`` selects the prove row like any property (a ``-k`` naming no row runs nothing).
    """
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "crossattn_sizing", "verify", "--policy",
         "tests.broken_policies:aligned_ceil_off_by_one", "-k", "test_slot_mapping or prove",
         "--json", str(report)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (policy,) = json.loads(report.read_text())["policies"]
    rows = {p["name"]: p["outcome"] for p in policy["properties"]}
    assert rows[NAME] == "fails"
    assert all(outcome == "holds" for name, outcome in rows.items() if name != NAME)
    assert policy["verdict"] == "fails"
    assert NAME in proc.stdout


def test_a_selection_naming_no_prove_row_leaves_it_out() -> None:
    assert wants_prove([]) and wants_prove(["prove"]) and wants_prove(["test_coverage or prove"])
    assert not wants_prove(["test_coverage"]) and not wants_prove(["not prove"])
