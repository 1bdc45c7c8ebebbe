"""The core layer: the model of the engine's sizing (configs, policies, admission, block-table capacity,
the slot layout kernels read). Pure Python: no torch, no Hypothesis; the torch step records
kernels read are :mod:`crossattn_sizing.impl.step`."""
