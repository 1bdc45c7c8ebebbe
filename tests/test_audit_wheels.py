"""The audit on the real release wheels 0.19.0-0.34.0: the verdicts the spec predicts.

Reads 16 wheels (about 4 GB, downloaded once into the audit's cache), so it
stays out of the default run: ``nox -s audit`` runs it
(``CROSSATTN_AUDIT_WHEELS=1 pytest -m audit_wheels``). The fast tests of the
same shapes, on recorded fixtures, are in ``test_audit_standins.py``.
"""

from __future__ import annotations

import os

import pytest

from crossattn_sizing.audit.verdicts import NEMOTRON, audit_tree, sweep_configs
from crossattn_sizing.base.outcome import Outcome
from crossattn_sizing.releases.sources import open_release

pytestmark = [
    pytest.mark.audit_wheels,
    pytest.mark.skipif(
        os.environ.get("CROSSATTN_AUDIT_WHEELS") != "1",
        reason="reads the 16 vLLM release wheels (~4 GB): run by `nox -s audit` (CROSSATTN_AUDIT_WHEELS=1)",
    ),
]

RELEASES = [f"0.{minor}.0" for minor in range(19, 35)]
# Nemotron-Parse first, then every 7th sweep config: enough to meet both failing and split-block shapes.
SAMPLE = [NEMOTRON, *sweep_configs()[1::7]]


def expected_v2(version: str) -> str:
    """Pre-fix max(M, S) through 0.24.0, fixed from 0.25.0 (PR #46753)."""
    return Outcome.FAILS if int(version.split(".")[1]) <= 24 else Outcome.HOLDS


def expected_v1(version: str) -> str:
    """V1 always sized with max(M, E); it is gone from 0.34.0."""
    return Outcome.HOLDS if int(version.split(".")[1]) <= 33 else Outcome.ABSENT


@pytest.mark.parametrize("version", RELEASES)
def test_release_verdicts(version):
    v2, v1 = audit_tree(open_release(version), ["v2", "v1"], SAMPLE)
    assert v2.outcome == expected_v2(version), v2.reason
    assert v1.outcome == expected_v1(version), v1.reason
    assert v2.path == v1.path == "read"
    if v2.outcome == Outcome.FAILS:
        assert v2.nemotron is not None
        assert (v2.nemotron["columns_needed"], v2.nemotron["columns_given"]) == (209, 128)
        assert v2.whisper is not None and v2.whisper["holds"]
