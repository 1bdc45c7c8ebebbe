"""Driving an engine's own code under the harness's properties (vLLM: ``vllm==X`` or ``vllm``).

- :mod:`.install`: where a release's code comes from (installed, or its wheel unpacked into a cache);
- :mod:`.worker` / :mod:`.client`: one subprocess per release, a JSON-lines protocol, crashes contained;
- :mod:`.sizing_exec`: ``initialize_kv_cache`` executed up to the end of its sizing loop;
- :mod:`.vllm`: the sizing policy, the implementation and the block-table scenario;
- :mod:`.coverage`: the coverage invariant judged on the release's own block tables.

A release's files come from :mod:`crossattn_sizing.releases.sources`; the audit's executed path
(:mod:`crossattn_sizing.audit.executed`) drives this package, never the other way round.

Nothing here is imported by the harness unless a ``vllm`` spec is used.
"""
