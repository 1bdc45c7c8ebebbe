"""Where a spec string (a policy, an implementation, ``vllm==X``, ``vllm@tree``) is resolved.

:mod:`.resolve` sits above everything a spec may name (core policies, impl, engine releases) and
below the runs and commands that take specs from the user.
"""
