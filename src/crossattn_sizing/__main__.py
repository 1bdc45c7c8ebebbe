"""``python -m crossattn_sizing`` runs the console script."""

import sys

from crossattn_sizing.cli import main

sys.exit(main())
