"""The reference oracle (``reference/``), under the name it has where this suite runs from.

In a clone the oracle is the top-level package ``reference``, beside
``properties/`` on the path. In an installed wheel both folders are mapped into
the package at build time (``crossattn_sizing.properties`` and
``crossattn_sizing.reference``; one copy of each file), so the top-level name
does not exist there. The suite's modules import the oracle from here, and
read the same either way.
"""

from __future__ import annotations

if __package__ == "crossattn_sizing.properties":  # the suite installed from the wheel
    from crossattn_sizing.reference import slots
    from crossattn_sizing.reference.attention import attention
    from crossattn_sizing.reference.block_table import BlockTable, expand
    from crossattn_sizing.reference.pool import BlockPool
    from crossattn_sizing.reference.slots import ColumnOutOfRange, local_length, self_attention_slots
else:  # a clone: reference/ is a top-level package beside properties/
    from reference import slots
    from reference.attention import attention
    from reference.block_table import BlockTable, expand
    from reference.pool import BlockPool
    from reference.slots import ColumnOutOfRange, local_length, self_attention_slots

__all__ = [
    "BlockPool",
    "BlockTable",
    "ColumnOutOfRange",
    "attention",
    "expand",
    "local_length",
    "self_attention_slots",
    "slots",
]
