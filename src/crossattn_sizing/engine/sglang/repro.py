"""SGLang's ``repro.py``: the FA3 decode metadata's own lines on a batch given as plain data.

The script a maintainer runs with only torch and numpy installed. The lines
that build the self-attention page table are taken from the release's
``flashattention_backend.py`` at report time, verbatim (their common
indentation aside), each block headed by its ``file:line`` (eager path:
``init_forward_metadata``; CUDA-graph replay: ``_apply_cuda_graph_metadata``),
and run on stand-ins holding only what those lines read: the
``req_to_token`` rows (``[encoder slots | decoder slots]`` per request,
rows handed out from 1 as ``ReqToTokenPool`` does) and the batch's lengths.
On the release the gather raises the ``IndexError`` the GPU turns into a
device-side assert; on a fixed copy it runs clean and each request's page
table holds its own slots (checked in the script). Found by needles, so a
release whose lines are elsewhere still renders; one whose lines are not
there at all (0.5.10's slice, before the gather) has no script.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from crossattn_sizing.engine.report_facts import NAMESPACE, Excerpt, excerpt, option_value

FA3 = "sglang/srt/layers/attention/flashattention_backend.py"
POOL = "sglang/srt/mem_cache/memory_pool.py"
SIZING = "sglang/srt/mem_cache/allocation_sizing.py"


def excerpts(root: Path) -> dict[str, Excerpt] | None:
    """The release's lines the script runs (eager batch max, its decode assignment, the gather; the
    replay's batch max and gather), or None when the tree does not hold them all."""
    eager = ("def init_forward_metadata(self",)
    replay = ("def _apply_cuda_graph_metadata(",)
    found = {
        "eager_max": excerpt(
            root, FA3, "seq_lens_cpu = forward_batch.seq_lens_cpu", "eager_max_k = (", eager
        ),
        "eager_decode": excerpt(
            root, FA3, "metadata.max_seq_len_k = eager_max_k", "", (*eager, "# Normal Decode")
        ),
        "eager_gather": excerpt(root, FA3, "text_max = metadata.max_seq_len_k", "text_row, text_col", eager),
        "replay_max": excerpt(
            root,
            FA3,
            "metadata.max_seq_len_k = (",
            "",
            (*replay, "# Normal Decode", "Page table uses the static"),
        ),
        "replay_gather": excerpt(
            root,
            FA3,
            "text_max = metadata.max_seq_len_k",
            "text_row, text_col",
            (*replay, "if encoder_lens is not None"),
        ),
        "pool_rows": excerpt(root, POOL, "self.free_slots = list(range(", "", ("class ReqToTokenPool",)),
    }
    if any(v is None for v in found.values()):
        return None
    return {k: v for k, v in found.items() if v is not None}


MARKED = (".max().item()", "text_col = ")
"""What marks a causing line in a site: the batch-wide maximum, and the column built from it."""


def causing(root: Path) -> list[tuple[Excerpt, str, tuple[int, ...]]]:
    """The code sites of the report: each excerpt with what it does and its causing lines (the batch-wide
    max first)."""
    found = excerpts(root) or {}
    says = {
        "eager_max": "eager path: the batch's longest decoder length (max over every request)",
        "eager_decode": "eager path, normal decode: that batch-wide maximum becomes max_seq_len_k",
        "eager_gather": "eager path: request i gathers columns encoder_lens[i] + arange(max_seq_len_k) "
        "(the causing line: a per-request offset with the batch-wide length)",
        "replay_max": "CUDA-graph replay (the default decode path): the batch-wide maximum again",
        "replay_gather": "CUDA-graph replay: the same gather (the causing line)",
    }
    return [(found[k], says[k], marks(found[k])) for k in says if k in found]


def marks(block: Excerpt) -> tuple[int, ...]:
    """The numbers of the block's lines holding a :data:`MARKED` needle."""
    return tuple(block.first + i for i, x in enumerate(block.lines) if any(m in x for m in MARKED))


def script(argv: Sequence[str], root: Path, release: str) -> str | None:
    """``repro.py`` for the failure's check line (``--context-len``, ``--requests E:P:D,...``) on the
    release's lines under ``root``; None when the release does not have them."""
    found = excerpts(root)
    context = option_value(argv, "--context-len")
    batch = [
        tuple(int(x) for x in r.split(":")) for r in (option_value(argv, "--requests") or "").split(",") if r
    ]
    if found is None or context is None or not batch:
        return None
    encoder = [b[0] for b in batch]
    decoder = [b[2] for b in batch]
    lines = [
        f'"""SGLang {release}: FlashAttention (FA3) decode metadata reads past a req_to_token row.',
        "",
        "Standalone: needs only torch and numpy, runs on a CPU. The blocks marked with a file:line are",
        f"SGLang {release}'s own lines, verbatim; the rest hands them the batch as plain data. On the",
        "release they raise IndexError (on a GPU: a device-side assert in the gather); fixed, they run",
        "clean and each request's page table holds its own slots. Run: python3 repro.py",
        '"""',
        "",
        "import numpy as np",
        "import torch",
        "",
        "# The batch at one decode step (every request admitted; each fits its own row).",
        f"CONTEXT_LEN = {int(context)}  # --context-length",
        "ROW_EXTRA = 4  # get_req_to_token_extra_context_len(): 4 + speculative draft tokens (none)",
        f"ENCODER_LENS = np.array({encoder})  # image (encoder) tokens at the head of each request's row",
        f"SEQ_LENS = np.array({decoder})  # text (decoder) tokens in each row at this step",
        "",
        "",
        *NAMESPACE,
        "",
        "",
        "def pool_rows(size):",
        "    # The rows a ReqToTokenPool of `size` requests hands out, in order (ReqToTokenPool.__init__).",
        "    self = Namespace(_alloc_size=size + 1)",
        *found["pool_rows"].body(),
        "    return self.free_slots",
        "",
        "",
        "def eager_metadata(self, forward_batch):",
        "    metadata = Namespace(max_seq_len_k=0, page_table=None)",
        *found["eager_max"].body(),
        *found["eager_decode"].body(),
        *found["eager_gather"].body(),
        "    return metadata",
        "",
        "",
        "def replay_metadata(self, bs, req_pool_indices, seq_lens, encoder_lens, seq_lens_cpu):",
        "    page_table = torch.zeros((bs, self.max_context_len + ROW_EXTRA), dtype=torch.int32)",
        "    metadata = Namespace(max_seq_len_k=0, page_table=page_table)",
        *found["replay_max"].body(),
        *found["replay_gather"].body(),
        "    return metadata",
        "",
        "",
        "def main():",
        "    bs = len(SEQ_LENS)",
        "    rows = np.array(pool_rows(bs)[:bs])",
        "    # req_to_token: one row per pool row, width context_len + extra; request i's row holds",
        "    # [ENCODER_LENS[i] encoder slots | SEQ_LENS[i] decoder slots], every slot id distinct.",
        "    req_to_token = torch.zeros((bs + 1, CONTEXT_LEN + ROW_EXTRA), dtype=torch.int32)",
        "    slot = 1",
        "    for row, used in zip(rows, ENCODER_LENS + SEQ_LENS):",
        "        req_to_token[row, :used] = torch.arange(slot, slot + used, dtype=torch.int32)",
        "        slot += int(used)",
        "    backend = Namespace(max_context_len=CONTEXT_LEN, req_to_token=req_to_token,",
        "                        req_to_token_pool=Namespace(req_to_token=req_to_token))",
        "    encoder_lens = torch.from_numpy(ENCODER_LENS).to(torch.int32)",
        "    seq_lens = torch.from_numpy(SEQ_LENS).to(torch.int32)",
        "    req_pool_indices = torch.from_numpy(rows).to(torch.int64)",
        "    forward_batch = Namespace(seq_lens=seq_lens, seq_lens_cpu=seq_lens.clone(),",
        "                              encoder_lens=encoder_lens,",
        "                              req_pool_indices=req_pool_indices, batch_size=bs)",
        "    paths = {",
        '        "eager (init_forward_metadata)": lambda: eager_metadata(backend, forward_batch),',
        '        "CUDA-graph replay (_apply_cuda_graph_metadata)": lambda: replay_metadata(',
        "            backend, bs, req_pool_indices, seq_lens, encoder_lens, seq_lens.clone()),",
        "    }",
        "    errors = []",
        "    for name, build in paths.items():",
        "        try:",
        "            page_table = build().page_table",
        "        except IndexError as err:",
        '            print(f"{name}: IndexError: {err}")',
        "            errors.append(err)",
        "            continue",
        "        for i, row in enumerate(rows):",
        "            own = req_to_token[row, ENCODER_LENS[i] : ENCODER_LENS[i] + SEQ_LENS[i]]",
        "            same = torch.equal(page_table[i, : SEQ_LENS[i]], own)",
        '            assert same, f"{name}: request {i} reads other slots"',
        '        print(f"{name}: every request reads only its own row")',
        "    if errors:",
        "        raise errors[0]",
        "",
        "",
        'if __name__ == "__main__":',
        "    main()",
    ]
    return "\n".join(lines) + "\n"
