"""Meta-tests: the differential admission properties catch a broken admission model.

Each broken rule is patched into ``crossattn_sizing.core.admission`` for one call of
the property; the property must fail, or it could not tell the model is wrong.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from crossattn_sizing.base.intmath import cdiv
from crossattn_sizing.core import admission
from crossattn_sizing.findings.results import PropertyFailure
from properties import test_admission

BROKEN: dict[str, tuple[str, Callable[..., int], Callable[[], None]]] = {
    # Coverage ignoring DCP: C times too many entries for a sharded group.
    "needed-ignores-dcp": (
        "entries_needed",
        lambda config, group, n: cdiv(n, group.kbs),
        test_admission.test_entries_needed_is_the_narrowest_row_the_oracle_accepts,
    ),
    # Coverage by floor division: one entry short whenever e is not a multiple.
    "needed-floors": (
        "entries_needed",
        lambda config, group, n: n // admission.tokens_per_entry(config, group),
        test_admission.test_entries_needed_is_the_narrowest_row_the_oracle_accepts,
    ),
    # Columns counted in manager blocks instead of kernel blocks.
    "column-in-manager-blocks": (
        "column_of",
        lambda config, group, p: p // (group.block_size * config.dcp_factor(group)),
        test_admission.test_column_of_is_the_oracle_column,
    ),
    # Allocation counted in kernel blocks of the unsharded sequence.
    "allocation-ignores-dcp": (
        "blocks_allocated",
        lambda config, group, n: cdiv(n, group.block_size),
        test_admission.test_entries_received_are_the_blocks_every_rank_fills,
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_admission_property_catches(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    attr, broken, prop = BROKEN[name]
    monkeypatch.setattr(admission, attr, broken)
    with pytest.raises(PropertyFailure):
        prop()
