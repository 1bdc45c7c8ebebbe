"""``python -m crossattn_sizing`` runs the console script."""

from crossattn_sizing.cli import console_main

console_main()
