"""What is found about a policy and the engine, beside what :mod:`crossattn_sizing.prove` proves: a property's
result records (:mod:`.results`), the DCP cross-attention finding (:mod:`.dcp`), the CUDA-graph capture
finding (:mod:`.graph_capture`) and the capacity map (:mod:`.capacity_map`)."""
