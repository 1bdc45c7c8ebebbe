"""The oracle's own tests (may use pytest and hypothesis; the oracle itself may not)."""
