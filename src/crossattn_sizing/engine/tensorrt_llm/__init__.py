"""TensorRT-LLM's own cross-pool sizing, run from a source tree: ``tensorrt_llm@PATH``.

- :mod:`.source`: the spec, the tree, and ``KvCacheCreator._get_cross_kv_cache_layout``
  read and compiled from ``tensorrt_llm/_torch/pyexecutor/_util.py`` as written
  (no torch, nothing of the engine imported);
- :mod:`.worker`: the process that executes it, one JSON request a line;
- :mod:`.sizer`: the judge's side: a worker per tree, with a deadline per call,
  answering "how long is the cross pool for this config" (or why it was not run).

No registry wheel holds TensorRT-LLM's Python source (docs/engine.md), so only
a tree is taken.
"""
