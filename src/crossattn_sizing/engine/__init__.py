"""Driving an engine's own code under the harness's properties: one sub-package per engine family.

Shared machinery (one copy for every engine):

- :mod:`.install`: where a release's code comes from (installed, or its wheel unpacked into a cache);
- :mod:`.worker` / :mod:`.client`: one subprocess per release, a JSON-lines protocol, crashes contained;
- :mod:`.protocol`: the worker's answers; :mod:`.tensors`: tensors across the pipe;
- :mod:`.isolated` / :mod:`.subject`: a user's ``module:attr`` in the same kind of worker;
- :mod:`.budget`: the engine runs' example budget; :mod:`.specs`: ``NAME@PATH`` trees.

Engines: :mod:`.vllm` (``vllm``, ``vllm==X``, ``vllm@PATH``), :mod:`.sglang`
(``sglang==X``, ``sglang@PATH``) and :mod:`.tensorrt_llm` (``tensorrt_llm@PATH``).

A release's files come from :mod:`crossattn_sizing.releases.sources`; the audit's executed path
(:mod:`crossattn_sizing.audit.executed`) drives this package, never the other way round.

Nothing here is imported by the harness unless an engine spec is used.
"""
