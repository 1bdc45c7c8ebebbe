"""``prove``: the coverage invariant checked on every config of a bounded domain, not a sample.

The package's public face: the names commands, tests and benchmarks use are
re-exported here, so a caller need not know which module holds what. The
modules, each named for what it holds:

* :mod:`.domain`: the configs proved over (option parsing, group shapes, canonical order);
* :mod:`.edges`: the default domain, dense around every width edge;
* :mod:`.vectors`: the built-in policies' widths in numpy form;
* :mod:`.batches`: asking any other policy about a tile of configs (``widths_many`` or one call each);
* :mod:`.sweep`: judging each tile, and :func:`prove` / :func:`prove_all` over a domain;
* :mod:`.counterexamples`: what a run found (:class:`ProveResult`, :class:`Counterexample`);
* :mod:`.verify_row`: that result as verify's ``prove::capacity_on_edge_domain`` row.

``edges`` and ``verify_row`` are imported by name where used: the core of the
check needs neither.
"""

from __future__ import annotations

from crossattn_sizing.prove.batches import Answer, BatchWidths, PolicyRaised, batch_method
from crossattn_sizing.prove.counterexamples import Counterexample, ProveResult
from crossattn_sizing.prove.domain import ABSENT, Domain, DomainError, group_table, parse_values
from crossattn_sizing.prove.sweep import DEFAULT_CHUNK_SIZE, prove, prove_all, scalar_check
from crossattn_sizing.prove.vectors import vector_form, vector_widths

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
