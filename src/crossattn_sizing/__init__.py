"""Property-based verification of cross-attention block-table sizing in paged KV caches."""
