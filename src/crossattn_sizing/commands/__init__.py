"""Subcommands of the ``crossattn-sizing`` console script.

Each module here exposes ``register(subparsers)``, which adds its parser and
sets ``func`` to a ``run(args) -> int`` callable. The CLI discovers them, so a
new command is one new module and no edit elsewhere.
"""
