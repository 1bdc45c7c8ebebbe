"""A restricted evaluator for the engine's sizing code, over its syntax tree.

It executes statements of the runner's ``initialize_kv_cache`` and of the
block-table classes it builds, but only computes with ints, lists of the
audited config's groups and names :mod:`~crossattn_sizing.audit.known` maps to
config fields. It never imports or calls engine code: a call to anything else
yields an :class:`~crossattn_sizing.audit.values.Unknown`, and so does anything
computed from one. Whatever is assigned under a condition it cannot decide is
merged: equal on both paths, or unknown ("depends on `cond`"). So a width
comes out as an int only when every input to it was known, and otherwise as
the reason it is not.

A block table is recognised by where it is allocated: inside a class whose
name contains ``BlockTable``, a call shaped ``f((max_num_reqs, W), ...)`` or
``f(max_num_reqs, W, ...)`` allocates one table of row width ``W``.

Parts: :mod:`.state` (frames, signals, allocations), :mod:`.syntax` (tree
helpers), :mod:`.statements`, :mod:`.expressions`, :mod:`.attributes`,
:mod:`.calls`, :mod:`.branches` (merging undecided paths) and
:mod:`.evaluator` (the :class:`Interpreter` assembled from them).
"""

from crossattn_sizing.audit.interp.evaluator import Interpreter
from crossattn_sizing.audit.interp.state import Allocation, RaiseSignal, ReadError

__all__ = ["Allocation", "Interpreter", "RaiseSignal", "ReadError"]
