"""Subcommands of the ``crossattn-sizing`` console script.

Each module here exposes ``register(subparsers)``, which adds its parser and
sets ``func`` to a ``run(args) -> int`` callable. The CLI discovers them, so a
new command is one new module and no edit elsewhere. The modules in
:data:`SHARED` are not commands: they hold what the commands share (each
option declared once, :mod:`crossattn_sizing.commands.options`).

The CLI itself (:mod:`.cli`), ``prove --symbolic`` (:mod:`.prove_symbolic`) and the
audit's report writers (:mod:`.audit_report`, :mod:`.audit_markdown`) live here too:
only a command writes them.
"""

SHARED = frozenset({"audit_markdown", "audit_report", "cli", "engines", "options", "prove_symbolic"})
