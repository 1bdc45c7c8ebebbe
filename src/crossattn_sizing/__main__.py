"""``python -m crossattn_sizing`` runs the console script."""

from crossattn_sizing.commands.cli import console_main

console_main()
