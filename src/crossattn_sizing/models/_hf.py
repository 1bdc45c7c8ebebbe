"""The one place that imports transformers, so the harness runs without it.

transformers is the optional ``hf`` extra: the core harness (sizing policies,
capacity checks) must import and run on a machine without it. Everything that
needs a transformers config class goes through :func:`require_transformers`,
which turns the ImportError into a :class:`HarnessError` the CLI prints as one
line instead of a traceback.
"""

from __future__ import annotations

import os
from types import ModuleType

from crossattn_sizing.base.errors import HarnessError

INSTALL_HINT = "pip install 'crossattn-sizing[hf]'"


def require_transformers() -> ModuleType:
    """The transformers module, or a HarnessError naming the extra to install.

    The hub is switched off first (unless the caller chose otherwise): every
    config here is built locally, and a stray download attempt would hang a
    machine without a network.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import transformers
    except ImportError as exc:
        raise HarnessError(
            f"this needs transformers, which is not installed ({exc}): {INSTALL_HINT}"
        ) from None
    return transformers
