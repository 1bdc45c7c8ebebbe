"""A ``KeyboardInterrupt`` at import that no Ctrl-C caused: the module's, not the user's."""

raise KeyboardInterrupt
