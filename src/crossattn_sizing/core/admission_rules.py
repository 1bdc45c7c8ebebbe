"""Each engine's admission rule, as a value the layouts and properties take (not a constant).

Which requests reach a table is the scheduler's decision, and engines decide it
differently: vLLM bounds a request's encoder tokens by ``min(E, B)``
(:mod:`crossattn_sizing.core.admission`, docs/spec.md §4), SGLang counts the
encoder tokens inside the request's input and bounds input and output by the
context length and the KV pool (docs/spec.md, "SGLang 0.5.23"). A property that
judges a layout must only feed it what its engine admits, so the rule travels
with the layout instead of being read from a module-level formula.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from crossattn_sizing.core import admission
from crossattn_sizing.core.config import RunnerConfig


@dataclass(frozen=True)
class EngineRequest:
    """One request as every engine's admission sees it, in tokens.

    ``encoder_len`` is 0 for a request with no encoder input (a text-only
    request to a multimodal model); ``max_new`` is the output it asked for.
    """

    encoder_len: int
    prompt_len: int
    max_new: int = 0

    def __post_init__(self) -> None:
        if self.encoder_len < 0 or self.prompt_len < 0 or self.max_new < 0:
            raise ValueError(f"negative length in {self}")

    @property
    def input_len(self) -> int:
        """Encoder and prompt tokens together: what SGLang's scheduler measures."""
        return self.encoder_len + self.prompt_len


class AdmissionRule(Protocol):
    """What an engine's scheduler admits, and how much output an admitted request may produce."""

    @property
    def name(self) -> str:
        """The engine's name, as reports show it (read-only: the rules are frozen dataclasses)."""
        ...

    def refusal(self, request: EngineRequest) -> str | None:
        """Why ``request`` is refused, or None when it is admitted."""
        ...

    def output_cap(self, request: EngineRequest) -> int:
        """Tokens an admitted request may generate: its ``max_new`` as the scheduler caps it."""
        ...


@dataclass(frozen=True)
class VllmAdmission:
    """vLLM: an encoder input of ``e`` tokens is scheduled iff ``e <= min(E, B)``.

    The decoder side is bounded by ``max_model_len`` when the request is
    validated; it is not part of the encoder rule this harness checks, so the
    output cap is the request's own.
    """

    config: RunnerConfig
    name: str = "vllm"

    def refusal(self, request: EngineRequest) -> str | None:
        """An encoder input past ``min(E, B)`` is refused (no encoder tokens: nothing to check)."""
        e = request.encoder_len
        if e == 0 or admission.admits(self.config, e):
            return None
        return f"encoder tokens {e} > min(E, B) = {admission.encoder_bound(self.config)}"

    def output_cap(self, request: EngineRequest) -> int:
        """vLLM does not cap the output on the encoder side: the request's own ``max_new``."""
        return request.max_new


@dataclass(frozen=True)
class SglangAdmission:
    """SGLang 0.5.23: encoder tokens count inside the request's input.

    ``max_req_len = min(context_len - 1, kv_capacity - 1)`` and
    ``max_req_input_len = max_req_len - 5`` (``managers/tp_worker.py``
    ``get_worker_info``); a prompt whose expanded input (image tokens included)
    is ``>= max_req_input_len`` is aborted (``managers/scheduler.py``
    ``_handle_generate_request``), and ``max_new_tokens`` is capped to
    ``max_req_len - input_len - 1`` (``init_req_max_new_tokens``).
    """

    context_len: int
    kv_capacity: int
    name: str = "sglang"

    def __post_init__(self) -> None:
        if self.context_len < 1 or self.kv_capacity < 1:
            raise ValueError(f"context_len and kv_capacity must be >= 1: {self}")

    @property
    def max_req_len(self) -> int:
        """``min(context_len - 1, kv_capacity - 1)``: the longest request, input and output."""
        return min(self.context_len - 1, self.kv_capacity - 1)

    @property
    def max_req_input_len(self) -> int:
        """An input of this many tokens or more is refused."""
        return self.max_req_len - 5

    @property
    def input_draw_limit(self) -> int:
        """The longest input a strategy offers: the longest this model admits."""
        return self.max_req_input_len - 1

    def refusal(self, request: EngineRequest) -> str | None:
        """An input (encoder plus prompt) of ``max_req_input_len`` or more is refused."""
        if request.input_len >= self.max_req_input_len:
            return (f"input {request.input_len} (encoder {request.encoder_len} + prompt "
                    f"{request.prompt_len}) >= max_req_input_len {self.max_req_input_len}")
        return None

    def output_cap(self, request: EngineRequest) -> int:
        """SGLang caps the output so input and output stay below ``max_req_len``."""
        return max(0, min(request.max_new, self.max_req_len - request.input_len - 1))


def admitted(rule: AdmissionRule, request: EngineRequest) -> bool:
    """Whether ``rule`` admits ``request``."""
    return rule.refusal(request) is None


class RowAdmission(AdmissionRule, Protocol):
    """An admission rule for a row shared by the encoder and decoder tokens (SGLang's model,
    :class:`SglangAdmission`, or a tree's own, answered by its worker): the limits a batch is drawn under."""

    @property
    def context_len(self) -> int:
        """The server's ``context_len``."""
        ...

    @property
    def kv_capacity(self) -> int:
        """The KV pool's token capacity."""
        ...

    @property
    def max_req_input_len(self) -> int:
        """The longest input (encoder and prompt tokens) a request may have."""
        ...

    @property
    def input_draw_limit(self) -> int:
        """How long a drawn input may be (the rule's own check decides past it)."""
        ...


class AdmissionUnanswered(Exception):
    """An engine's own admission steps did not answer: ``verdict`` says why (``fails`` or ``not run``)."""

    def __init__(self, verdict: dict[str, Any]) -> None:
        super().__init__(verdict.get("reason") or verdict.get("message"))
        self.verdict = verdict
