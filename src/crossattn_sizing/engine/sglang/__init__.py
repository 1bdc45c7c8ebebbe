"""SGLang's own code from a release (``sglang==X``, ``sglang@PATH``), run in its own worker.

- :mod:`.source`: a release file's body run with its imports bound to stand-ins;
- :mod:`.run`: the functions run, over a guarded ``req_to_token``;
- :mod:`.install`: ``sglang==X`` (the wheel, unpacked) and ``sglang@PATH``;
- :mod:`.worker` / :mod:`.client`: its worker process and the harness's side of it;
- :mod:`.check`: one decode batch judged (``check`` and ``reproduce`` with ``--engine sglang==X``).
"""
