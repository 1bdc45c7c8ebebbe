"""vLLM's own code from a release (``vllm``, ``vllm==X``, ``vllm@PATH``), run in the shared worker.

- :mod:`.release`: the imported release the worker answers with; :mod:`.quirks`: where releases differ;
- :mod:`.shims`: the CPU shims; :mod:`.kernels`: the release's own kernels, found;
- :mod:`.sizing_exec`: ``initialize_kv_cache`` executed up to the end of its sizing loop;
- :mod:`.adapters`: the ``vllm==X`` sizing policy, implementation and block-table scenario;
- :mod:`.coverage`: the coverage invariant judged on the release's own block tables.
"""
