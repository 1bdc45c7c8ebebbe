"""The property suite: every invariant a sizing policy and an implementation must keep."""
