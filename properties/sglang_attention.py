"""Attention through an SGLang release's own ``TorchNativeAttnBackend`` equals the reference's.

The read-side properties judge the columns a GPU backend's metadata hands its
kernel; this one runs attention itself, as SGLang does on a CPU. A batch of
Whisper or Mllama requests (:func:`properties.sglang_attention_strategies.attention_cases`)
is laid into the release's own rows (its ``ReqToTokenPool``, its extend
stripping, its decode rule: ``[E encoder | d decoder]`` per row), the
release's ``forward_extend`` writes each request's encoder K/V at the
``encoder_out_cache_loc`` its extend computed, and both its ``forward_extend``
(the prompt's queries) and its ``forward_decode`` (the step's query) attend
over the cross-attention layer's keys through those rows. Every output must
equal the reference's dense attention over the request's own encoder keys
(``reference/``, float64). Unwritten slots hold NaN, so a read of any column
that is not the request's encoder part shows in the output.

Not a ``test_`` module: it takes an SGLang tree (``--read-builder sglang==X``
or ``sglang@PATH``), which ``verify --engine sglang...`` and the tests hand
it. A batch the harness cannot run on the release (its range has no
cross-attention path, a piece its adapter lacks) is skipped with the reason:
never a pass, never a failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import pytest
import torch
from hypothesis import given, settings

from crossattn_sizing.findings.results import NOT_RUN_MARK

from .failures import fail_rerun, judge_against
from .impl_assertions import Tolerance
from .oracle import attention
from .sglang_attention_strategies import AttentionCase, attention_cases

TOLERANCE = Tolerance(
    rtol=1e-4,
    atol=5e-5,
    reason="the backend runs torch's SDPA in fp32 over <= 6404 encoder keys from the same fp32 inputs the "
    "float64 reference reads: ~sqrt(L)*2^-24*max|v| <= 80*6e-8*5 = 2.4e-5; 2x margin. One encoder key "
    "dropped or added among 1500 moves an output by ~|v|/1500 ~ 7e-4, and a column outside the encoder "
    "part reads a NaN slot.",
)


class SglangAttention(Protocol):
    """The attention step the engine fixture gives (``read_builder.attention()``): an SGLang tree's own
    ``TorchNativeAttnBackend`` in its worker. Declared here, as what the property needs of it: the family
    that implements it is reached only through the engine registry."""

    @property
    def name(self) -> str:
        """How reports name the tree: its spec."""
        ...

    def pack(self, values: Sequence[float]) -> str:
        """Floats as the worker reads them."""
        ...

    def run(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The worker's answer: ``ran`` with the outputs, ``fails`` or ``not run`` with the reason."""
        ...


NEEDS_TREE = ("properties/sglang_attention.py runs an SGLang tree's own backend: give --read-builder "
              "sglang==X or sglang@PATH")
"""The usage error (properties/conftest.py) of a run that collects this property without a tree."""


@pytest.fixture(scope="session")
def sglang_attention(read_builder: Any) -> SglangAttention:
    """The attention step of the tree ``--read-builder`` names (the engine fixture's ``attention()``: its
    worker started, ``--call-timeout`` on each call)."""
    if not hasattr(read_builder, "attention"):  # refused at collection (properties/conftest.py)
        pytest.exit(NEEDS_TREE, returncode=pytest.ExitCode.USAGE_ERROR)
    return read_builder.attention()


def payload(case: AttentionCase, content: dict[str, list[torch.Tensor]], pack: Any) -> dict[str, Any]:
    """What the worker is asked: the batch, the layer's shape and the content, packed by ``pack`` (the
    backend's own)."""
    out: dict[str, Any] = {"context_len": case.context_len, "batch": [list(r) for r in case.batch],
                           "heads": case.heads, "kv_heads": case.kv_heads, "head_dim": case.head_dim,
                           "scale": case.scale}
    for name, tensors in content.items():
        out[name] = [pack(t.flatten().tolist()) for t in tensors]
    return out


def expected(case: AttentionCase, content: dict[str, list[torch.Tensor]], i: int,
             queries: torch.Tensor) -> list[list[float]]:
    """The reference's cross-attention of ``queries`` (``[n, H*D]``) over request ``i``'s own encoder keys:
    ``[n][H*D]``, query head ``h`` on KV head ``h // (H / KVH)`` (grouped-query attention)."""
    d, group = case.head_dim, case.heads // case.kv_heads
    rows: list[list[float]] = [[] for _ in range(queries.shape[0])]
    for h in range(case.heads):
        q = queries[:, h * d : (h + 1) * d].double().tolist()
        keys = content["k"][i][:, h // group].double().tolist()
        values = content["v"][i][:, h // group].double().tolist()
        out, _lse = attention(q, keys, values, case.scale)
        for row, part in zip(rows, out, strict=True):
            row.extend(part)
    return rows


def first_mismatch(got: list[list[float]], want: list[list[float]]) -> str | None:
    """The first element outside :data:`TOLERANCE` (NaN never within it), said with both values."""
    if len(got) != len(want):
        return f"{len(got)} output rows, expected {len(want)}"
    for r, (g_row, w_row) in enumerate(zip(got, want, strict=True)):
        if len(g_row) != len(w_row):
            return f"row {r}: {len(g_row)} values, expected {len(w_row)}"
        for j, (g, w) in enumerate(zip(g_row, w_row, strict=True)):
            if not abs(g - w) <= TOLERANCE.atol + TOLERANCE.rtol * abs(w):  # NaN fails this too
                return f"row {r}, element {j}: got {g!r}, expected {w!r}"
    return None


def check_attention(case: AttentionCase, backend: SglangAttention) -> None:
    """The property's body, shared with the meta-tests: run the release's backend, judge every output."""
    content = case.content()
    answer = backend.run(payload(case, content, backend.pack))
    heading = f"SGLang attention ({backend.name}'s TorchNativeAttnBackend, cross-attention layer)"
    rerun = ["--read-builder", backend.name]
    if answer["verdict"] == "not run":  # the adapter's gap: never a pass, never a failure of the release
        pytest.skip(f"{NOT_RUN_MARK}{backend.name}: {answer['reason']}")
    if answer["verdict"] == "fails":  # a hang or a crash names itself (the step, the deadline)
        fail_rerun([f"{heading}: {answer.get('headline') or 'the release did not lay the batch out'}",
                    *case.lines(),
                    f"  {answer['message']}"], rerun)
    for i, request in enumerate(case.batch):
        e = request[0]
        for step, got, queries in (("forward_extend", answer["extend"][i], content["q_extend"][i]),
                                   ("forward_decode", [answer["decode"][i]], content["q_decode"][i])):
            # Within TOLERANCE (its reason is stated with it, above).
            want = expected(case, content, i, queries)
            judge_against((x for row in want for x in row), "the reference (dense attention in float64)")
            problem = first_mismatch(got, want)
            if problem is not None:
                fail_rerun([f"{heading}: output off the reference", *case.lines(),
                            f"  request {i} ({e} encoder tokens), {step}: {problem}",
                            f"  tolerance: rtol={TOLERANCE.rtol:g} atol={TOLERANCE.atol:g} "
                            f"({TOLERANCE.reason})"],
                           rerun)


# A quarter of the profile's examples: each attends in pure Python (the reference) over up to 6404 encoder
# keys, about a second an example on a loaded CPU; the shapes are few (two models, their tile counts).
assert settings.default is not None  # the plugin loaded a profile
SHARE = settings(max_examples=max(1, settings.default.max_examples // 4))


@SHARE
@given(case=attention_cases())
def test_cross_attention_matches_reference(case: AttentionCase, sglang_attention: SglangAttention) -> None:
    """Every prompt and decode query of a Whisper or Mllama batch, through the release's own backend on its
    own rows, equals dense attention over the request's own encoder keys."""
    check_attention(case, sglang_attention)
