"""vLLM's facts for ``report`` (see :mod:`crossattn_sizing.engine.report_facts`).

A vLLM failure under ``--policy vllm==X`` is a verdict on the widths the
release's own ``GPUModelRunner.initialize_kv_cache`` gave (executed in the
worker): the line that sizes the rows is the observation's site, found in
that release's ``gpu/model_runner.py`` (the ``max()`` that gives the block
table its length). Users state a case as the model's config, the engine
arguments (``--max-model-len``, ``--max-num-batched-tokens``, the
scheduler's ``max_num_encoder_input_tokens``, ``--block-size``, DCP) and the
requests' encoder tokens. The release table is the sizing audit's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from crossattn_sizing.core.known_configs import NEMOTRON_PAGE_TOKENS, nemotron_parse
from crossattn_sizing.engine.report_facts import (
    PNG_HELPER,
    SPEC,
    CodeSite,
    Excerpt,
    ReportFacts,
    Served,
    StepFacts,
    first_line_with,
    option_value,
    quote_lines,
)

RUNNER_FILE = "vllm/v1/worker/gpu/model_runner.py"
SIZING_LINE = "block_table_max_model_len = max("
"""The start of the statement that gives every block-table row its length (0.19.0 to 0.34.0)."""

TOO_SHORT = "rows are sized without max_num_encoder_input_tokens"
WRONG_KV = "silent garbage (KV of another request's blocks) or an illegal memory access past the block table"
STEPS = {
    "test_capacity::test_coverage": StepFacts(
        title=f"ModelRunner V2 cross-attention block table too short for encoder inputs longer than "
        f"max_model_len ({TOO_SHORT})",
        step="GPUModelRunner.initialize_kv_cache: block table row width from max(max_model_len, "
        "max_source_positions)",
        gpu=f"the encoder tokens past the row have no column: their KV is written and read through ids past "
        f"the row, {WRONG_KV}",
    ),
    "test_capacity::test_allocation": StepFacts(
        title=f"ModelRunner V2 block table row receives more block ids than its width ({TOO_SHORT})",
        step="BlockTables.append_block_ids into rows sized by GPUModelRunner.initialize_kv_cache",
        gpu=f"block ids spill into the next request's row: {WRONG_KV}",
    ),
}
ATTENTION = StepFacts(
    title=f"ModelRunner V2 cross-attention reads another request's KV for long encoder inputs ({TOO_SHORT})",
    step="paged cross-attention over block table rows sized by GPUModelRunner.initialize_kv_cache",
    gpu=f"wrong attention output: {WRONG_KV}",
)


def steps(name: str) -> StepFacts:
    """The step facts of a property: capacity and attention properties are the sizing's consequences."""
    if name in STEPS:
        return STEPS[name]
    if "attention" in name:
        return ATTENTION
    return StepFacts(
        title=f"ModelRunner V2 block table sizing violates the harness property {name}",
        step="GPUModelRunner.initialize_kv_cache",
        gpu="not known for this property: see the diagnosis",
    )


def minimal_case(argv: Sequence[str]) -> list[str]:
    """The case as a vLLM user states it: model shape, engine arguments, requests."""
    import json

    config = json.loads(option_value(argv, "--config") or "{}")
    lens = [int(x) for x in (option_value(argv, "--encoder-len") or "").split(",") if x]
    source = config.get("max_source_positions")
    if source is None:
        shape = "an encoder-decoder model whose HF config has no `max_source_positions`"
        if NEMOTRON_PAGE_TOKENS in lens:
            shape += f" (Nemotron-Parse: {NEMOTRON_PAGE_TOKENS} encoder tokens for one 2048x1664 page)"
    else:
        shape = f"an encoder-decoder model with `max_source_positions` {source} (Whisper-like)"
    groups = config.get("groups", [])
    sizes = sorted({g["block_size"] for g in groups})
    kinds = ", ".join(f"{g['kind']} (block size {g['block_size']})" for g in groups)
    options = [
        f"`--max-model-len {config.get('max_model_len')}`",
        f"`--max-num-batched-tokens {config.get('max_num_batched_tokens')}`",
    ]
    if config.get("max_num_encoder_input_tokens") is not None:
        options.append(f"scheduler `max_num_encoder_input_tokens` {config['max_num_encoder_input_tokens']}")
    options.append("`--block-size " + "/".join(str(s) for s in sizes) + "`")
    if int(config.get("dcp_size", 1)) > 1:
        options.append(f"`--decode-context-parallel-size {config['dcp_size']}`")
    return [
        f"- model: {shape}; KV-cache groups: {kinds}",
        "- engine: ModelRunner V2, " + ", ".join(options),
        "- requests: " + ", ".join(f"one with {e} encoder tokens" for e in lens),
    ]


def deployed(name: str) -> list[str] | None:
    """A capacity failure's case as deployed: Nemotron-Parse, one 2048x1664 page, ``--max-model-len 2048``."""
    if not name.startswith("test_capacity::"):
        return None
    import json

    text = json.dumps(nemotron_parse().to_dict(), separators=(",", ":"), sort_keys=True)
    return ["check", "--policy", SPEC, "--config", text, "--encoder-len", str(NEMOTRON_PAGE_TOKENS)]


def site(name: str, root: Path, spec: str, argv: Sequence[str]) -> CodeSite | None:
    """The sizing line of the release's ``initialize_kv_cache``, as that release's file has it."""
    line = first_line_with(root, RUNNER_FILE, SIZING_LINE)
    if line is None:
        return None
    how = "the row-length line of GPUModelRunner.initialize_kv_cache, the sizing the harness executed"
    return CodeSite(RUNNER_FILE, line, how, quote_lines(root, RUNNER_FILE, line, before=1, after=4))


FIX_RELEASE = "0.25.0"
FIX = ("PR #46753 (merged "
       "2026-06-26): the row length takes the scheduler's encoder budget into its `max()`")  # fmt: skip


def _key(release: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", release)[:3]]


def fixed_upstream(name: str, release: str) -> str:
    """The sizing findings are fixed from 0.25.0 on: said first for an older release."""
    if not name.startswith("test_capacity::") and "attention" not in name:
        return ""
    if not release or not _key(release) or _key(release) >= _key(FIX_RELEASE):
        return ""
    return f"Fixed in {FIX_RELEASE} by {FIX}. {release} is affected; {FIX_RELEASE} and later are not."


def summary(name: str, release: str) -> str:
    """The capacity findings' first paragraph, in a vLLM maintainer's words."""
    if not name.startswith("test_capacity::") and "attention" not in name:
        return ""
    return (
        f"With ModelRunner V2 (`VLLM_USE_V2_MODEL_RUNNER=1`), vLLM {release or 'this release'} gives every "
        "block-table row of an encoder-decoder model the length `max(max_model_len, max_source_positions)`, "
        "so a model whose config has no `max_source_positions` (Nemotron-Parse; BART and mBART likewise) "
        "gets cross-attention rows of `--max-model-len` tokens. The defect shows whenever a request's "
        "**encoder tokens > the row's tokens**, `cdiv(max(max_model_len, max_source_positions), block_size)` "
        "rounded up to a multiple of `128 // block_size`, times `block_size`: one 2048x1664 page is 3329 "
        "encoder tokens against 2048 at `--max-model-len 2048`. The block ids past the row land in the next "
        "request's row, and that request's cross-attention or this one's then reads another request's KV "
        "(wrong output) or past the table (an illegal memory access). ModelRunner V1 sizes these rows with "
        "`max(max_model_len, max_num_encoder_input_tokens)` and is not affected."
    )


def expected(name: str) -> str:
    """What the rows should cover."""
    if not name.startswith("test_capacity::") and "attention" not in name:
        return ""
    return ("Every admitted request's encoder tokens have their own columns in its cross-attention row "
            "(the row covers `max_num_encoder_input_tokens`), and cross-attention reads only the request's "
            "own K/V.")  # fmt: skip


def repro_script(argv: Sequence[str], root: Path, release: str) -> str | None:
    """The sizing's standalone script (:mod:`crossattn_sizing.engine.vllm.repro`)."""
    from crossattn_sizing.engine.vllm import repro

    return repro.script(argv, root, release)


def sites(root: Path) -> list[tuple[Excerpt, str, tuple[int, ...]]]:
    """The row length (the causing line), the per-group width, the unbounded append and the lookup."""
    from crossattn_sizing.engine.vllm import repro

    found = repro.excerpts(root) or {}
    says = {
        "length": "GPUModelRunner.initialize_kv_cache: the row length, without max_num_encoder_input_tokens "
        "(the causing line)",
        "width": "the same method: each group's row width from that length",
        "append": "BlockTables.append_block_ids: ids staged from the row's start, no bound against its width",
        "lookup": "_compute_slot_mappings_kernel: the unmasked block lookup of a position",
    }
    out = []
    for key, text in says.items():
        if key in found:
            block = found[key]
            causing = tuple(block.first + i for i, x in enumerate(block.lines) if SIZING_LINE in x)
            out.append((block, text, causing))
    return out


def served(argv: Sequence[str]) -> Served | None:
    """Nemotron-Parse with one 2048x1664 page at ``--max-model-len 2048`` on ModelRunner V2."""
    import json

    config = json.loads(option_value(argv, "--config") or "{}") if argv else {}
    lens = [int(x) for x in (option_value(argv, "--encoder-len") or "").split(",") if x] if argv else []
    if config.get("max_source_positions") is not None or NEMOTRON_PAGE_TOKENS not in lens:
        return None
    launch = ("VLLM_USE_V2_MODEL_RUNNER=1 vllm serve nvidia/NVIDIA-Nemotron-Parse-v1.1 --trust-remote-code "
              f"--max-model-len {config.get('max_model_len')} --max-num-batched-tokens "
              f"{config.get('max_num_batched_tokens')} --block-size 16 --gpu-memory-utilization 0.8 "
              "--port 8000")  # fmt: skip
    client = "\n".join([
        '"""Two page images at once (stdlib only): the 2048x1664 page, then any other request beside it."""',
        "import base64, json, struct, threading, urllib.request, zlib",
        "",
        "",
        *PNG_HELPER,
        "",
        "",
        "def send(width, height):",
        "    url = 'data:image/png;base64,' + base64.b64encode(png(width, height)).decode()",
        "    body = {'model': 'nvidia/NVIDIA-Nemotron-Parse-v1.1', 'max_tokens': 64, 'temperature': 0,",
        "            'messages': [{'role': 'user',",
        "                          'content': [{'type': 'image_url', 'image_url': {'url': url}}]}]}",
        "    req = urllib.request.Request('http://127.0.0.1:8000/v1/chat/completions',",
        "                                 json.dumps(body).encode(),",
        "                                 {'Content-Type': 'application/json'})",
        "    reply = json.loads(urllib.request.urlopen(req, timeout=600).read())",
        "    print(reply['choices'][0]['message']['content'][:200])",
        "",
        "",
        "threads = [threading.Thread(target=send, args=size) for size in ((1664, 2048), (1664, 2048))]",
        "for t in threads:",
        "    t.start()",
        "for t in threads:",
        "    t.join()",
    ])  # fmt: skip
    gpu = "one GPU with 24 GB or more (any that ModelRunner V2 runs on; the model is under 1B parameters)"
    note = ("Compare the two outputs with each page sent alone: the page whose row spills reads the other "
            "request's blocks. Whether that is wrong text or an illegal memory access depends on what lies "
            "past the row.")  # fmt: skip
    return Served(gpu, launch, client + "\n", note)


FACTS = ReportFacts(
    engine="vllm",
    tracker="vLLM",
    steps=steps,
    minimal_case=minimal_case,
    site=site,
    releases=tuple(f"0.{n}.0" for n in range(19, 35)),
    release_source="audit",
    spec_option="--policy",
    deployed=deployed,
    summary=summary,
    expected=expected,
    sites=sites,
    repro=repro_script,
    served=served,
    fixed_upstream=fixed_upstream,
)
