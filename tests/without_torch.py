"""A pytest plugin (``-p tests.without_torch``) that makes torch unimportable, as in a wheel installed
without the extra: ``import torch`` fails and ``importlib.util.find_spec("torch")`` answers None."""

import sys

sys.modules["torch"] = None  # type: ignore[assignment]
