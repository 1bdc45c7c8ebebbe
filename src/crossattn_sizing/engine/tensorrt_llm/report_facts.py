"""TensorRT-LLM's facts for ``report`` (see :mod:`crossattn_sizing.engine.report_facts`).

The one property ``verify --engine tensorrt_llm@PATH`` runs is the cross
pool's capacity: every admitted request's encoder tokens fit the pool that the
tree's own ``KvCacheCreator._get_cross_kv_cache_layout`` sizes. Its failure's
``check`` line holds the case as TensorRT-LLM's users state it: the model's
Hugging Face config, the LLM arguments ``max_input_len`` and ``max_seq_len``,
``KvCacheConfig.tokens_per_block``, and one request's encoder tokens.

The code site is found by running the case: the worker traces which lines of
the tree's sizing ran (:meth:`~crossattn_sizing.engine.tensorrt_llm.sizer.TrtllmCrossPool.executed_lines`),
and the last of them that sets ``max_seq_len`` (the pool's length) is the
line marked, quoted with the rest of the length's computation from the tree's
own file. TensorRT-LLM is run from a tree only (docs/engine.md), so there is
no release table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from crossattn_sizing.core.cross_pool import CrossPoolCase, CrossPoolNotRun, whisper_large_v3_case
from crossattn_sizing.engine.report_facts import (
    SPEC,
    CodeSite,
    ReportFacts,
    StepFacts,
    check_args,
    option_value,
    quote_lines,
)
from crossattn_sizing.engine.tensorrt_llm.source import QUALNAME, UTIL

PROPERTY = "cross_pool_capacity::encoder_tokens_fit_the_cross_pool"
"""The property's name in verify's report (:mod:`crossattn_sizing.runs.cross_pool_verify`)."""

SETS_LENGTH = re.compile(r"^\s*max_seq_len\s*=")
"""A line of the sizing that sets the cross pool's length (the fourth value it returns)."""

STEP = StepFacts(
    title="Cross-attention KV cache pool is shorter than the encoder output of an admitted request "
    "(KvCacheCreator._get_cross_kv_cache_layout)",
    step=f"{QUALNAME} (PyTorch flow): the cross KV cache's max_seq_len, from max_input_len (else the "
    "engine's max_seq_len), capped by the first encoder-limit key the model's config declares",
    gpu="the request's encoder output does not fit its cross-attention KV cache: the attention metadata "
    "cannot be prepared for it (an assert in its prepare step), so the request fails",
)

HF_IDS = {
    "whisper-": "openai/whisper-",
    "t5-": "google-t5/t5-",
    "bart-": "facebook/bart-",
    "mbart-": "facebook/mbart-",
}
"""A family name's prefix -> the public model id's (the sizes are the published configs')."""


def steps(name: str) -> StepFacts:
    """The step facts of a property; a property not listed here is named as the harness names it."""
    if name == PROPERTY:
        return STEP
    return StepFacts(
        title=f"TensorRT-LLM encoder-decoder requests violate the harness property {name}",
        step=name,
        gpu="not known for this property: see the diagnosis",
    )


def _case(argv: Sequence[str]) -> CrossPoolCase:
    """The failure's case from its check argv (``--config`` JSON and ``--encoder-len``)."""
    config = json.loads(option_value(argv, "--config") or "{}")
    return CrossPoolCase.from_dict(config, int(option_value(argv, "--encoder-len") or 0))


def model_id(family: str) -> str:
    """The public model id of a family the property draws (``whisper-large-v3``: openai/whisper-large-v3)."""
    for prefix, owner in HF_IDS.items():
        if family.startswith(prefix):
            return owner + family.removeprefix(prefix)
    return family


def minimal_case(argv: Sequence[str]) -> list[str]:
    """The case as a TensorRT-LLM user states it: the model, the LLM arguments, the request."""
    case = _case(argv)
    declared = ", ".join(f"`{k}`" for k in case.declared()) or "no encoder-limit key"
    unset = "unset" if case.max_input_len is None else str(case.max_input_len)
    if case.model.audio:
        request = (f"one request: {case.encoder_len} encoder tokens (the audio encoder emits "
                   f"{case.model.encoder_positions} frames for every input: 30 s of audio)")  # fmt: skip
    else:
        request = f"one request: a {case.encoder_len}-token encoder prompt"
    return [
        f"- model: `{model_id(case.family)}` (PyTorch flow); its config declares {declared}",
        f"- LLM arguments: `max_input_len` {unset}, `max_seq_len` {case.max_seq_len}, "
        f"`KvCacheConfig(tokens_per_block={case.tokens_per_block})`",
        f"- {request}",
    ]


def deployed(name: str) -> list[str] | None:
    """The property's case as deployed: Whisper-large-v3 under TensorRT-LLM's defaults (max_input_len
    1024)."""
    if name != PROPERTY:
        return None
    return check_args(whisper_large_v3_case().check_line(SPEC))


def site(name: str, root: Path, spec: str, argv: Sequence[str]) -> CodeSite | None:
    """The last line of the tree's sizing that set the pool's length on the failure's case, traced as the
    tree's code ran it; quoted from there back to the first such line and on to the return."""
    if name != PROPERTY or not argv:
        return None
    from crossattn_sizing.engine.tensorrt_llm.sizer import TrtllmCrossPool

    try:
        ran = TrtllmCrossPool(spec).executed_lines(_case(argv))
    except CrossPoolNotRun:
        return None
    text = (root / UTIL).read_text(encoding="utf-8", errors="replace").splitlines()
    sets = [n for n in ran if 0 < n <= len(text) and SETS_LENGTH.match(text[n - 1])]
    if not sets:
        return None
    line = sets[-1]
    how = (f"the last line of {QUALNAME} that set the cross pool's length (max_seq_len) for this case, "
           "traced as the tree's code ran")  # fmt: skip
    quoted = quote_lines(root, UTIL, line, before=line - sets[0], after=max(ran) - line)
    return CodeSite(UTIL, line, how, quoted)


FACTS = ReportFacts(
    engine="tensorrt_llm",
    tracker="TensorRT-LLM",
    steps=steps,
    minimal_case=minimal_case,
    site=site,
    releases=(),
    release_source="check",
    spec_option="--engine",
    deployed=deployed,
    no_releases="Not computed: TensorRT-LLM is run from a source tree only (the registry's tensorrt-llm "
    "holds no Python source, docs/engine.md); run `report` on another checkout for another commit.",
)
