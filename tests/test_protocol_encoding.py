"""An answer the protocol cannot encode is one line saying so, never a trace from inside ``json``.

Before: a value of the engine's that is not JSON (a tensor, a numpy integer, a cycle) raised in the
worker's ``json.dumps``; the worker died and the parent gave the end of its stderr, a trace from
``json/encoder.py``, as the "not run" reason (or, for SGLang's read side, as a "fails"). Now the
worker answers that request with an ``Unencodable`` failure naming the op and the value's type, and
stays up for the next request; a forked call (a deadline) answers the same, not "died".
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import torch

from crossattn_sizing.engine import protocol
from crossattn_sizing.engine.worker import forked


def cycle() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (torch.tensor([3, 4]), "Object of type Tensor is not JSON serializable"),
        ({1, 2}, "Object of type set is not JSON serializable"),
        (cycle(), "Circular reference detected"),
    ],
)
def test_an_answer_that_is_not_json_is_one_line_and_the_worker_stays_up(
    monkeypatch: pytest.MonkeyPatch, value: object, says: str
) -> None:
    requests = [{"op": "layout"}, {"op": "width"}]
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(json.dumps(r) + "\n" for r in requests)))
    out = io.StringIO()
    assert protocol.serve(out, lambda req: value if req["op"] == "layout" else 7) == 0
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["ok"] is False and first["kind"] == "Unencodable"
    assert first["said"] == f"the answer to layout holds a value the protocol cannot send ({says})"
    assert "\n" not in first["said"] and "encoder.py" not in first["said"]
    assert second == {"ok": True, "result": 7}


def test_a_forked_call_whose_answer_is_not_json_says_so_rather_than_died() -> None:
    reply = forked(lambda: {"ok": True, "result": torch.zeros(2)}, 60.0, "paged_attention")
    assert reply["kind"] == "Unencodable", reply
    assert "the answer to paged_attention holds a value the protocol cannot send" in reply["said"]
