"""Every field of the stand-ins SGLang's admission steps are handed is declared, with a server's value.

- The objects the admission hands the release's steps (captured at the call, on the recorded 0.5.23
  tree) set exactly the fields ``STAND_IN_FIELDS`` declares: a field set but not declared fails.
- Per tree the tests build (the recorded 0.5.23 tree; every audited release in ``nox -s engine``,
  tests/test_sglang_real.py): the stand-in request holds the ids the release's own construction gives
  (``Req.__init__`` and the models' ``pad_input_ids``, run from the tree): the encoder placeholders and
  the prompt in ``origin_input_ids``, the prompt alone in ``origin_input_ids_unpadded``.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

from crossattn_sizing.engine.sglang.admission import admission_stand_ins, load
from crossattn_sizing.engine.sglang.releases import range_for
from crossattn_sizing.engine.sglang.stand_in_fields import (
    ENCODER_PAD_ID,
    PROMPT_ID,
    STAND_IN_FIELDS,
    request,
    schedule_settings,
    scheduler_self,
    worker_self,
)
from tests.sglang_request import PAD, differences
from tests.sglang_tree import FIXTURE, copy_tree

DRAWS = [(0, 5), (3, 5), (1500, 20), (6404, 1), (2, 0)]
"""``(E, prompt)``: no encoder input, a short and a Whisper-sized encoder, Mllama's 4-tile image, no
prompt."""


def fields_set(obj: Any, prefix: str = "") -> set[str]:
    """The dotted paths of the fields set on a stand-in, nested stand-ins followed."""
    paths: set[str] = set()
    for name, value in vars(obj).items():
        if isinstance(value, types.SimpleNamespace):
            paths |= fields_set(value, f"{prefix}{name}.")
        else:
            paths.add(prefix + name)
    return paths


def _declared(name: str) -> set[str]:
    return {f.path for f in STAND_IN_FIELDS[name]}


def test_each_builder_sets_exactly_its_declared_fields() -> None:
    built = {
        "the request (Req)": request(3, 5, 7, False, [].append),
        "TpModelWorker's self": worker_self(64, 128),
        "Scheduler's self": scheduler_self(63, 128, None),
        "get_schedule()": schedule_settings(),
    }
    assert set(built) == set(STAND_IN_FIELDS)
    for name, obj in built.items():
        assert fields_set(obj) == _declared(name), name
    for fields in STAND_IN_FIELDS.values():
        assert all(f.value and f.why for f in fields)
        assert len({f.path for f in fields}) == len(fields)  # each declared once


def test_the_objects_handed_to_the_release_s_steps_are_the_declared_ones() -> None:
    """Captured where the admission calls the release's own steps: every field each object holds then is
    declared (a field the harness added anywhere on the way fails here)."""
    rng, _ = range_for(FIXTURE)
    admission = load(FIXTURE, rng)
    handed: dict[str, list[set[str]]] = {name: [] for name in STAND_IN_FIELDS}

    def capture(step: Any, *names: str) -> Any:  # names[i]: what the step's argument i stands in for
        def call(*args: Any, **kwargs: Any) -> Any:
            for name, arg in zip(names, args, strict=False):
                handed[name].append(fields_set(arg))
            return step(*args, **kwargs)

        return call

    admission.worker_info = capture(admission.worker_info, "TpModelWorker's self")
    admission.output_cap = capture(admission.output_cap, "Scheduler's self", "the request (Req)")
    admission.input_check = capture(admission.input_check, "the request (Req)")
    limits = admission.limits(2048, 4096)
    for draw in [(1500, 20, 10**6), (0, 5, 3), (2000, 100, 1)]:
        admission.judge(limits, 4096, draw)
    handed["get_schedule()"].append(fields_set(admission_stand_ins()["get_schedule"]()))
    for name, seen in handed.items():
        assert seen, name
        assert all(paths == _declared(name) for paths in seen), (name, seen)


@pytest.mark.parametrize(("encoder_len", "prompt_len"), DRAWS)
@pytest.mark.parametrize("model", sorted(PAD))
def test_the_recorded_release_builds_the_stand_in_s_request(encoder_len: int, prompt_len: int,
                                                            model: str) -> None:
    rng, _ = range_for(FIXTURE)
    assert differences(FIXTURE, rng, encoder_len, prompt_len, model) == []


def test_the_stand_in_request_counts_the_encoder_in_the_padded_ids_only() -> None:
    req = request(4, 3, 9, False, [].append)
    assert list(req.origin_input_ids) == [ENCODER_PAD_ID] * 4 + [PROMPT_ID] * 3
    assert list(req.origin_input_ids_unpadded) == [PROMPT_ID] * 3
    lists = request(4, 3, 9, True, [].append)
    assert lists.origin_input_ids == list(req.origin_input_ids) and isinstance(lists.origin_input_ids, list)


def test_a_release_that_pads_the_unpadded_ids_is_told_apart(tmp_path: Path) -> None:
    """The comparison can fail: a copy whose Req.__init__ keeps the ids doubled as its unpadded ids."""
    rel = "sglang/srt/managers/schedule_batch.py"
    old = "            else self.origin_input_ids\n"
    tree = copy_tree(tmp_path / "t", {rel: (old, "            else self.origin_input_ids * 2\n")})
    rng, _ = range_for(tree)
    found = differences(tree, rng, 3, 5, "whisper")
    assert any(d.startswith("origin_input_ids_unpadded:") for d in found), found


def test_a_dotted_import_binds_its_top_package() -> None:
    """``import torch.utils.checkpoint`` after ``import torch`` (models/mllama.py) leaves ``torch`` the
    package, as Python binds it, so the release's ``torch.cat`` is torch's."""
    import torch

    from crossattn_sizing.engine.sglang.source import bind

    assert bind("torch", "torch.utils.checkpoint", None, {}) is torch
    assert bind("F", "torch.nn.functional", None, {}) is torch.nn.functional
