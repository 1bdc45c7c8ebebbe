"""``prove``: the coverage invariant checked on every config of a bounded domain, not a sample.

The package's public face: the names commands, tests and benchmarks use are
re-exported here. The modules: :mod:`.check` (the domain and the check),
:mod:`.edges` (the default domain) and :mod:`.verdict` (verify's prove row).

``edges`` and ``verdict`` are imported by name where used: the core of the
check needs neither.
"""

from __future__ import annotations

from crossattn_sizing.prove.check import (
    ABSENT,
    DEFAULT_CHUNK_SIZE,
    Answer,
    BatchWidths,
    Counterexample,
    Domain,
    DomainError,
    PolicyRaised,
    ProveResult,
    batch_method,
    group_table,
    parse_values,
    prove,
    prove_all,
    scalar_check,
    vector_form,
    vector_widths,
)

__all__ = [
    "ABSENT",
    "DEFAULT_CHUNK_SIZE",
    "Answer",
    "BatchWidths",
    "Counterexample",
    "Domain",
    "DomainError",
    "PolicyRaised",
    "ProveResult",
    "batch_method",
    "group_table",
    "parse_values",
    "prove",
    "prove_all",
    "scalar_check",
    "vector_form",
    "vector_widths",
]
