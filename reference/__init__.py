"""Pure-Python reference model ("the oracle") of a paged KV cache with block tables.

Standard library only, and independent of ``crossattn_sizing``: the oracle is what the
torch/Triton implementation is compared against, so it must not share code or
dependencies with it. Modules are named after what they hold:

- ``pool``: the block allocator (block 0 is the null block).
- ``block_table``: request rows of block ids, kernel-block expansion, overflow as data.
- ``slots``: slot mapping for self- and cross-attention, DCP ownership and local lengths.
- ``cache``: a paged K/V cache whose cells start poisoned with NaN.
- ``attention``: dense attention with log-sum-exp, and the DCP merge of partials.
- ``model``: scenarios tying these together with plain data.
- ``checks``: the argument checks the modules above share.

Nothing is re-exported here, so importing one module never pulls in the others.
"""
