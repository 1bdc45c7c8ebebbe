"""The core layer: the model of the engine's sizing (configs, policies, admission, block-table capacity,
the step records and slot layout kernels read). Pure Python: no torch kernels, no Hypothesis."""
