"""The oracle's tests run as a harness run (the Hypothesis profile of ``CROSSATTN_PROFILE``), as the
suite's do. A module attribute, no import: the oracle stays independent of the package."""

crossattn_sizing_harness = True
