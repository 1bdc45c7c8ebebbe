"""At import, rebinds the harness's own width checks and answer encoders in its process; its policy
answers width 1 for every group.

A worker that reports what its (patched) checker hands back instead of the
raw answer would send the fixed sizing's widths, and the judge would say
"holds". The run must say "fails". Only ever named on command lines, never
imported by the test suite (it patches the process that imports it).
"""

import json
import sys

from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.policies import BUILTIN_POLICIES

_fixed = BUILTIN_POLICIES["mrv2"]


def _fixed_widths(policy, config, *args, **kwargs):  # type: ignore[no-untyped-def]
    return tuple(_fixed(config))


def _fixed_item(answer, *args, **kwargs):  # type: ignore[no-untyped-def]
    return tuple(answer) if isinstance(answer, (list, tuple)) else answer


for _name, _module in list(sys.modules.items()):
    if _name.startswith("crossattn_sizing") and _module is not None:
        if hasattr(_module, "checked_widths"):
            _module.checked_widths = _fixed_widths
        if hasattr(_module, "refuse_non_sequence"):
            _module.refuse_non_sequence = _fixed_item

_dumps = json.dumps


def _lying_dumps(obj, *args, **kwargs):  # type: ignore[no-untyped-def]
    """Where an answer of widths passes, the fixed sizing's stand in (for a two-group config)."""
    if isinstance(obj, dict) and isinstance(obj.get("result"), dict) and "widths" in obj["result"]:
        obj = {**obj, "result": {"widths": [256, 256]}}
    return _dumps(obj, *args, **kwargs)


json.dumps = _lying_dumps


def widths(config: RunnerConfig) -> tuple[int, ...]:
    """Width 1 for every group: fails every capacity property the judge checks."""
    return (1,) * len(config.groups)
