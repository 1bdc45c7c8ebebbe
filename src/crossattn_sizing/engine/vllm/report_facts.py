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

from collections.abc import Sequence
from pathlib import Path

from crossattn_sizing.core.known_configs import NEMOTRON_PAGE_TOKENS, nemotron_parse
from crossattn_sizing.engine.report_facts import (
    SPEC,
    CodeSite,
    ReportFacts,
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
)
