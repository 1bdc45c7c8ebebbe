"""Real models' configs in the harness's terms (the ``hf`` extra: transformers is optional).

:mod:`.adapters` turns a Whisper, BART, mBART or Nemotron-Parse config into a
:class:`~crossattn_sizing.core.config.RunnerConfig` and encoder tokens per request;
:mod:`.nemotron_parse` holds the Nemotron-Parse stand-in config (the real one is
remote code); :mod:`.loading` reads a ``--config`` file of either kind;
:mod:`.scenario` judges a scenario under a sizing policy and :mod:`.drift` runs
it unguarded through the implementation: what ``crossattn-sizing reproduce``
prints. Nothing here imports transformers or torch until it is used.
"""
