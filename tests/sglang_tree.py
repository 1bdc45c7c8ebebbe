"""Copies of the recorded SGLang 0.5.23 tree (tests/fixtures/sglang/0.5.23) with one change each, for tests.

``bounded_copy`` clamps both FA3 self-attention gathers (eager and CUDA-graph
replay) to each request's own last column, on the same line, so line numbers
stay the release's: the fix the read-side property must accept.
"""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURE = Path(__file__).parent / "fixtures" / "sglang" / "0.5.23"
SPEC = f"sglang@{FIXTURE}"
FA3 = "sglang/srt/layers/attention/flashattention_backend.py"

EAGER_LINE = "            ) + arange_text.unsqueeze(0)  # (bs, max_seq_len_k)\n"
EAGER_BOUNDED = ("            ) + arange_text.unsqueeze(0); text_col = torch.minimum(text_col, (forward_batch"
                 ".encoder_lens + forward_batch.seq_lens - 1).long().unsqueeze(1))\n")
REPLAY_LINE = "            text_col = encoder_lens[:bs].long().unsqueeze(1) + arange_text.unsqueeze(0)\n"
REPLAY_BOUNDED = ("            text_col = torch.minimum(encoder_lens[:bs].long().unsqueeze(1) + "
                  "arange_text.unsqueeze(0), (encoder_lens[:bs] + seq_lens[:bs] - 1).long().unsqueeze(1))\n")


def copy_tree(dest: Path, replacements: dict[str, tuple[str, str]] | None = None) -> Path:
    """The fixture copied to ``dest``, each ``file: (old line, new line)`` replaced exactly once."""
    shutil.copytree(FIXTURE, dest)
    for rel, (old, new) in (replacements or {}).items():
        path = dest / rel
        text = path.read_text()
        assert text.count(old) == 1, (rel, old)
        path.write_text(text.replace(old, new))
    return dest


def bounded_copy(dest: Path) -> Path:
    """The tree with both gathers bounded by each request's own length."""
    copy_tree(dest)
    path = dest / FA3
    text = path.read_text()
    assert text.count(EAGER_LINE) == 1 and text.count(REPLAY_LINE) == 1
    path.write_text(text.replace(EAGER_LINE, EAGER_BOUNDED).replace(REPLAY_LINE, REPLAY_BOUNDED))
    return dest
