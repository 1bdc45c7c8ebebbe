"""Modules that misbehave when imported: a ``--policy``/``--impl`` naming one is bad input (exit 2).

Each file does one thing at import and nothing else; they are never imported
by the test suite itself, only named on command lines.
"""
