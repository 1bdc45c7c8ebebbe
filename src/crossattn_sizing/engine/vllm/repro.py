"""vLLM's ``repro.py``: ModelRunner V2's row sizing and slot lookup on a batch given as plain data.

The script a maintainer runs with only torch and numpy installed. From the
release's files, verbatim (their common indentation aside), each block
headed by its ``file:line``: the row length of
``GPUModelRunner.initialize_kv_cache`` (the ``max()`` and the per-group
``cdiv`` and alignment) and the block lookup of
``_compute_slot_mappings_kernel`` (a Triton kernel whose lines are plain
arithmetic: they run here on a small ``tl.load`` over numpy "pointers", an
unmasked load of ``base + offset`` as the kernel's is). The append of block
ids is stated as data: ``BlockTables.append_block_ids`` stages the ids at
the row's start with no bound against the row's width, so ids past it land
in the next row. The script writes each request's encoder K/V through those
slots, reads them back as cross-attention does and compares the output with
a dense computation over the request's own K/V: on the release the long
request reads the next request's blocks (wrong values, an AssertionError);
with PR #46753's line it matches.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from crossattn_sizing.engine.report_facts import NAMESPACE, Excerpt, excerpt, option_value

RUNNER = "vllm/v1/worker/gpu/model_runner.py"
TABLE = "vllm/v1/worker/gpu/block_table.py"


def excerpts(root: Path) -> dict[str, Excerpt] | None:
    """The release's lines the script runs, or None when the tree does not hold them all."""
    init = ("def initialize_kv_cache(self",)
    found = {
        "length": excerpt(
            root, RUNNER, "block_table_max_model_len = self.max_model_len", "max_source_positions", init
        ),
        "width": excerpt(
            root, RUNNER, "max_num_blocks = cdiv(", "max_num_blocks = cdiv(max_num_blocks, alignment)", init
        ),
        "append": excerpt(
            root,
            TABLE,
            "start = self.num_blocks.np[i, req_index]",
            "block_ids = new_block_ids[i]",
            ("def append_block_ids(",),
        ),
        "lookup": excerpt(
            root,
            TABLE,
            "block_indices = positions // (block_size * CP_SIZE)",
            "slot_ids = block_numbers * block_size + block_offsets",
            ("def _compute_slot_mappings",),
        ),
    }
    if any(v is None for v in found.values()):
        return None
    return {k: v for k, v in found.items() if v is not None}


def script(argv: Sequence[str], root: Path, release: str) -> str | None:
    """``repro.py`` for the failure's check line (``--config JSON``, ``--encoder-len``) on the release's
    lines under ``root``; None when the release does not have them or the case has no cross group."""
    found = excerpts(root)
    config = json.loads(option_value(argv, "--config") or "{}")
    lens = [int(x) for x in (option_value(argv, "--encoder-len") or "").split(",") if x]
    cross = [g for g in config.get("groups", []) if g.get("kind") == "cross"]
    if found is None or not lens or not cross or int(config.get("dcp_size", 1)) != 1:
        return None
    m, b = int(config["max_model_len"]), int(config["max_num_batched_tokens"])
    e = int(config.get("max_num_encoder_input_tokens") or b)
    s = config.get("max_source_positions")
    hf = "Namespace()" if s is None else f"Namespace(max_source_positions={int(s)})"
    lines = [
        f'"""vLLM {release}, ModelRunner V2: a cross-attention row shorter than the encoder input.',
        "",
        "Standalone: needs only torch and numpy, runs on a CPU. The blocks marked with a file:line are",
        f"vLLM {release}'s own lines, verbatim (the Triton kernel's lines run on numpy 'pointers'); the rest",
        "hands them the requests as plain data. Each request's encoder K/V is written through its slots and",
        "read back as cross-attention reads it, then compared with dense attention over its own K/V.",
        "On the release the long request reads the next request's blocks (AssertionError: wrong values).",
        "Run: python3 repro.py",
        '"""',
        "",
        "import numpy as np",
        "import torch",
        "",
        f"MAX_MODEL_LEN = {m}  # --max-model-len",
        f"MAX_NUM_ENCODER_INPUT_TOKENS = {e}  # the scheduler's encoder budget",
        f"MAX_NUM_BATCHED_TOKENS = {b}  # --max-num-batched-tokens",
        f"BLOCK_SIZE = {int(cross[0]['block_size'])}  # --block-size (the cross-attention group)",
        f"ENCODER_LENS = {lens}  # encoder tokens of each request (each admitted: at most the budget)",
        "NEXT_REQUEST = BLOCK_SIZE  # any request admitted next, into the following row (one block)",
        "HEAD_DIM = 8",
        "",
        "",
        *NAMESPACE,
        "",
        "",
        "def cdiv(a, b):  # vllm.utils.math_utils.cdiv",
        "    return -(a // -b)",
        "",
        "",
        "class Pointer:  # a Triton pointer: a flat buffer and offsets; tl.load is unmasked, as the kernel's",
        "    def __init__(self, flat, offset=0):",
        "        self.flat, self.offset = flat, offset",
        "",
        "    def __add__(self, k):",
        "        return Pointer(self.flat, self.offset + k)",
        "",
        "",
        "tl = Namespace(load=lambda p: p.flat[p.offset])",
        "",
        "",
        "def row_width(self):",
        "    # GPUModelRunner.initialize_kv_cache, for the cross-attention group.",
        "    spec = Namespace(block_size=BLOCK_SIZE)",
        *found["length"].body(),
        *found["width"].body(),
        "    return max_num_blocks",
        "",
        "",
        "def append_block_ids(self, req_index, new_block_ids, overwrite=False):",
        "    # BlockTables.append_block_ids for one group (i = 0): the ids are staged at the row's start;",
        "    # the staged-write kernel stores them from there, with no bound against the row's width.",
        "    i = 0",
        *found["append"].body(),
        "    row = self.block_table.reshape(-1)",
        "    at = req_index * self.width + start",
        "    row[at : at + len(block_ids)] = block_ids  # past the row's width: into the next row",
        "    self.num_blocks.np[i, req_index] = start + len(block_ids)",
        "",
        "",
        "def slot_mapping(block_table_ptr, block_table_stride, req_state_idx, positions):",
        "    # _compute_slot_mappings_kernel: the block of a position's slot, read from the request's row.",
        "    CP_SIZE, block_size = 1, BLOCK_SIZE",
        *found["lookup"].body(),
        "    return slot_ids",
        "",
        "",
        "def main():",
        "    runner = Namespace(max_model_len=MAX_MODEL_LEN, is_encoder_decoder=True, dcp_size=1,",
        f"                       model_config=Namespace(hf_config={hf}),",
        "                       scheduler_config=Namespace(",
        "                           max_num_encoder_input_tokens=MAX_NUM_ENCODER_INPUT_TOKENS))",
        "    width = row_width(runner)",
        "    lens = [*ENCODER_LENS, NEXT_REQUEST]",
        "    table = Namespace(width=width, block_table=np.zeros((len(lens) + 1, width), dtype=np.int64),",
        "                      num_blocks=Namespace(np=np.zeros((1, len(lens) + 1), dtype=np.int64)),",
        "                      blocks_per_kv_block=[1], block_tables=None)",
        "    first = 1  # block 0 is the null block",
        "    owned = []",
        "    for r, n in enumerate(lens):",
        "        ids = list(range(first, first + cdiv(n, BLOCK_SIZE)))",
        "        append_block_ids(table, r, (ids,))",
        "        owned.append(set(ids))",
        "        first += len(ids)",
        "    cache_k = np.zeros((first * BLOCK_SIZE, HEAD_DIM))",
        "    cache_v = np.zeros((first * BLOCK_SIZE, HEAD_DIM))",
        "    rng = np.random.default_rng(0)",
        "    flat = Pointer(table.block_table.reshape(-1))",
        "    kv, slots = [], []",
        "    for r, n in enumerate(lens):  # a request's first step writes its encoder K/V through its slots",
        "        k, v = rng.standard_normal((n, HEAD_DIM)), rng.standard_normal((n, HEAD_DIM))",
        "        s = slot_mapping(flat, width, r, np.arange(n))",
        "        cache_k[s], cache_v[s] = k, v",
        "        kv.append((k, v))",
        "        slots.append(s)",
        '    print(f"row width: {width} blocks ({width * BLOCK_SIZE} tokens); encoder: {ENCODER_LENS}")',
        "    wrong = []",
        "    for r, n in enumerate(ENCODER_LENS):  # a decode step reads the same slots (cross-attention)",
        "        blocks = slots[r] // BLOCK_SIZE",
        "        foreign = np.nonzero([int(x) not in owned[r] for x in blocks])[0]",
        "        if foreign.size:",
        "            p = int(foreign[0])",
        '            print(f"request {r}: encoder position {p} is read from block {int(blocks[p])}, "',
        '                  f"not one of its own "',
        '                  f"(its blocks: {min(owned[r])}..{max(owned[r])})")',
        "        q = torch.from_numpy(rng.standard_normal((1, HEAD_DIM)))",
        "        k, v = (torch.from_numpy(x) for x in kv[r])",
        "        dense = torch.softmax(q @ k.T / HEAD_DIM**0.5, -1) @ v",
        "        pk, pv = torch.from_numpy(cache_k[slots[r]]), torch.from_numpy(cache_v[slots[r]])",
        "        paged = torch.softmax(q @ pk.T / HEAD_DIM**0.5, -1) @ pv",
        "        error = float((paged - dense).abs().max())",
        '        print(f"request {r}: cross-attention vs dense over its own K/V: max abs diff {error:.3g}")',
        "        if not torch.allclose(paged, dense):",
        "            wrong.append(r)",
        '    assert not wrong, f"wrong cross-attention, request(s) {wrong}: another request\'s K/V was read"',
        "",
        "",
        'if __name__ == "__main__":',
        "    main()",
    ]
    return "\n".join(lines) + "\n"
