"""Implementations that cannot be used as implementations: bad input, never a property failure.

Unlike ``broken_impls`` (plausible kernel slips the properties must catch),
each of these leaves the process or fakes a Ctrl-C, at creation or inside a
kernel the suite calls; every command and the pytest plugin must refuse them
with one line naming the implementation (exit 2; pytest: 4).
"""

from __future__ import annotations

import sys

import torch

from crossattn_sizing.impl import TorchImpl


def exits_on_creation(device: torch.device) -> TorchImpl:
    """``sys.exit(0)`` from the factory."""
    sys.exit(0)


def interrupts_on_creation(device: torch.device) -> TorchImpl:
    """A ``KeyboardInterrupt`` from the factory that no Ctrl-C caused."""
    raise KeyboardInterrupt


class ExitsInSlotMapping(TorchImpl):
    """Builds fine; its slot-mapping kernel calls ``sys.exit(0)`` inside the suite."""

    name = "unusable-exits-in-slot-mapping"

    def slot_mapping(self, *, step, out):  # type: ignore[no-untyped-def]
        sys.exit(0)


class InterruptsInAttention(TorchImpl):
    """Builds fine; its attention kernel raises a ``KeyboardInterrupt`` no SIGINT caused."""

    name = "unusable-interrupts-in-attention"

    def paged_attention(self, *, query, key_cache, value_cache, step):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt
