"""A request as an SGLang tree's own code builds it, beside the admission's stand-in request (for tests).

A server builds a request in two steps: ``Req.__init__`` (``managers/schedule_batch.py``) keeps the
tokenizer's ids, and the scheduler's ``handle_generate_request``, for a request with encoder input,
replaces ``origin_input_ids`` by the model's ``pad_input_ids`` output (``models/whisper.py``,
``models/mllama.py``). :func:`own_request` runs the tree's own code for both: the statements of
``Req.__init__`` that set the fields the stand-in declares, compiled alone with the constructor's own
parameters, and the model's ``pad_input_ids`` compiled alone from its file. :func:`differences` lists
where the harness's stand-in (:func:`crossattn_sizing.engine.sglang.stand_in_fields.request`) holds
something else.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import torch

from crossattn_sizing.engine.sglang.admission import assignments_alone
from crossattn_sizing.engine.sglang.releases import SCHEDULE_BATCH, SglangRange, Step
from crossattn_sizing.engine.sglang.run import _method
from crossattn_sizing.engine.sglang.source import bind, parse_release_file
from crossattn_sizing.engine.sglang.stand_in_fields import PROMPT_ID, REQUEST_FIELDS, request, request_ids

REQ_INIT = Step(SCHEDULE_BATCH, "Req.__init__")
PAD = {  # model: (file, class), whose pad_input_ids the scheduler runs on a request with encoder input
    "whisper": ("sglang/srt/models/whisper.py", "WhisperForConditionalGeneration"),
    "mllama": ("sglang/srt/models/mllama.py", "MllamaForConditionalGeneration"),
}
MLLAMA_PAD_VALUE = 7
"""The pad value of the one image item handed to Mllama's ``pad_input_ids`` (a hash in a server)."""

BUILT_BY_INIT = tuple(sorted({f.path.split(".")[0] for f in REQUEST_FIELDS} - {"set_finish_with_abort"}))
"""The request's declared fields ``Req.__init__`` sets (``set_finish_with_abort`` is the class's method)."""


def _pad(root: Path, model: str, ids: Any, encoder_len: int) -> Any:
    """``ids`` padded by ``model``'s own ``pad_input_ids`` for an encoder of ``encoder_len`` tokens:
    Whisper with ``max_source_positions = encoder_len``; Mllama with one image of one tile of
    ``encoder_len`` patches."""
    rel, cls = PAD[model]
    module = parse_release_file(root, rel)
    ns = {name: bind(name, source, attr, {}) for name, (source, attr) in module.imports.items()}
    pad = _method(module, cls, "pad_input_ids", ns)
    if model == "whisper":
        owner = types.SimpleNamespace(config=types.SimpleNamespace(max_source_positions=encoder_len))
        mm = types.SimpleNamespace(num_image_tokens=None)
    else:
        owner = types.SimpleNamespace(vision_model=types.SimpleNamespace(num_patches=encoder_len))
        item = types.SimpleNamespace(feature=torch.zeros(1, 1, 1, 1), pad_value=MLLAMA_PAD_VALUE)
        mm = types.SimpleNamespace(mm_items=[item], num_image_tokens=None)
    padded = pad(owner, ids, mm)
    assert mm.num_image_tokens == encoder_len, (model, mm.num_image_tokens)  # the encoder part it counts
    return padded[:]  # duplicate_pad_mm_input_ids: the scheduler keeps a copy


def own_request(root: Path, rng: SglangRange, encoder_len: int, prompt_len: int, model: str) -> Any:
    """The request ``(E, prompt)`` as the tree's own code builds it (module docstring), with the prompt's
    ids as the tokenizer hands them (``PROMPT_ID`` each, the release's list or ``array('q')``)."""
    module = parse_release_file(root, REQ_INIT.file)
    init = assignments_alone(module, REQ_INIT, BUILT_BY_INIT, parameters=True)
    assert init is not None, f"{root}: Req.__init__ sets none of {BUILT_BY_INIT}"
    _, text_ids = request_ids(0, prompt_len, rng.input_ids_are_lists)
    params = types.SimpleNamespace(max_new_tokens=5, min_new_tokens=0)
    req = types.SimpleNamespace()
    init(req, "drawn", "the prompt", text_ids, params)
    assert req.sampling_params is params  # the client's sampling params, kept as they come
    if encoder_len:  # handle_generate_request: only a request with encoder input is padded
        req.origin_input_ids = _pad(root, model, req.origin_input_ids, encoder_len)
    return req


def differences(root: Path, rng: SglangRange, encoder_len: int, prompt_len: int, model: str) -> list[str]:
    """Where the harness's stand-in request for ``(E, prompt)`` differs from the tree's own (empty: none).

    The ids are compared by type, length and value; the encoder placeholders' values are the model's
    (Whisper's zeros are the stand-in's, Mllama's its images' pad values), so for Mllama only their count
    and the prompt after them are compared.
    """
    own = own_request(root, rng, encoder_len, prompt_len, model)
    stand = request(encoder_len, prompt_len, 5, rng.input_ids_are_lists, [].append)
    found = []
    for name in BUILT_BY_INIT:
        if name == "sampling_params":
            continue  # checked in own_request: the object the client sent, kept as it came
        mine, theirs = getattr(stand, name), getattr(own, name)
        if type(mine) is not type(theirs) or len(mine) != len(theirs):
            found.append(f"{name}: {type(theirs).__name__} of {len(theirs)} from the release, "
                         f"{type(mine).__name__} of {len(mine)} in the stand-in")
        elif name == "origin_input_ids" and model == "mllama":
            if list(mine[encoder_len:]) != list(theirs[encoder_len:]) or list(theirs[:encoder_len]) != (
                    [MLLAMA_PAD_VALUE] * encoder_len):  # fmt: skip
                found.append(f"{name}: the prompt after the {encoder_len} placeholders differs")
        elif mine != theirs:
            found.append(f"{name}: {theirs!r} from the release, {mine!r} in the stand-in")
    if (own.origin_input_ids is own.origin_input_ids_unpadded) != (
            stand.origin_input_ids is stand.origin_input_ids_unpadded):  # fmt: skip
        found.append("origin_input_ids and origin_input_ids_unpadded: one object in one, two in the other")
    if not all(isinstance(x, int) and x == PROMPT_ID for x in own.origin_input_ids_unpadded):
        found.append("origin_input_ids_unpadded: the release's are not the tokenizer's ids")
    return found
