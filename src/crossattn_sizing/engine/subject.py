"""A user's policy or implementation inside its worker process: loaded once, asked per request.

Why a worker: the code under test may exit, crash, hang, start threads,
replace signal handlers or rebind the harness's own functions. In its own
process none of that reaches the judge, which computes every verdict from
the values sent back (:mod:`crossattn_sizing.engine.isolated`). The loop is
the release worker's (:mod:`crossattn_sizing.engine.worker`, ``--load``); this
module holds the ``op_<name>`` methods it dispatches to, as
:class:`~crossattn_sizing.engine.vllm.release.Engine` does for a release.

The checks that need the user's own objects run here, since only their
values cross the pipe: a width answer must be a list or tuple of ints (a
dict, generator or string is refused, its type named), and each input a
kernel was handed is fingerprinted after the call, so the judge can name an
input the kernel changed. The judge does not trust these for a pass: it
checks the widths again and compares the fingerprints with its own.
"""

from __future__ import annotations

import hashlib
from typing import Any

from crossattn_sizing.base import usercode
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.policies import checked_widths, policy_from_spec, refuse_non_sequence
from crossattn_sizing.engine.protocol import failure

POLICY, IMPL = "policy", "impl"


class NamedPolicy:
    """The user's policy under the spec they typed, so every line the worker writes names it so."""

    def __init__(self, spec: str, policy: Any) -> None:
        self.name = spec
        self.policy = policy

    def __call__(self, config: RunnerConfig) -> Any:
        """The wrapped policy's answer, unchanged."""
        return self.policy(config)


class PolicySubject:
    """A ``module:attr`` sizing policy: ``widths`` and, when it has one, its batch method."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.policy = policy_from_spec(spec)
        self.named = NamedPolicy(spec, self.policy)
        many = getattr(self.policy, "widths_many", None)
        self.many = many if callable(many) else None

    def ready(self) -> dict[str, Any]:
        """What the judge learns once: whether there is a batch method, and what the policy expects."""
        expected = getattr(self.policy, "expected_to_hold", True)
        summary = getattr(self.policy, "summary", None)
        return {
            "batch": self.many is not None,
            "expected_to_hold": expected if isinstance(expected, bool) else True,
            "summary": summary if isinstance(summary, str) else None,
        }

    def op_widths(self, req: dict[str, Any]) -> dict[str, Any]:
        """The widths of one config, checked as in the judge (a copy of the config, the answer's shape)."""
        return {"widths": list(checked_widths(self.named, RunnerConfig.from_dict(req["config"])))}

    def op_widths_many(self, req: dict[str, Any]) -> dict[str, Any]:
        """The batch method's answers, each a list of ints or what it was instead (``ok: false``).

        A policy without a batch method is asked one config at a time here, in
        the worker: ``prove`` then pays one round trip per batch, not per config.
        """
        configs = [RunnerConfig.from_dict(c) for c in req["configs"]]
        if self.many is None:
            return {"results": [self._single(c) for c in configs]}
        many = self.many
        answers = usercode.call(lambda: list(many(configs)), what=f"sizing policy {self.spec}: widths_many")
        return {"results": [self._item(a) for a in answers]}

    def _single(self, config: RunnerConfig) -> dict[str, Any]:
        try:
            return {"ok": True, "result": list(checked_widths(self.named, config))}
        except Exception as exc:
            return {"ok": False, **failure(exc)}

    def _item(self, answer: Any) -> dict[str, Any]:
        if isinstance(answer, BaseException):
            return {"ok": False, **failure(answer)}
        try:
            values = refuse_non_sequence(answer, f"sizing policy {self.spec}: widths_many")
        except Exception as exc:
            return {"ok": False, **failure(exc)}
        if not all(type(v) is int for v in values):
            said = usercode.shown(values, "answer", as_repr=True)
            return {
                "ok": False,
                "kind": "PolicyCallError",
                "error": f"PolicyCallError: sizing policy {self.spec}: widths_many answered {said}, not ints",
            }
        return {"ok": True, "result": list(values)}


def fingerprint(value: Any) -> str:
    """A digest of a tensor (dtype, shape, bytes) or of a plain value's repr: what "unchanged" compares."""
    import torch

    digest = hashlib.blake2b(digest_size=16)
    if isinstance(value, torch.Tensor):
        digest.update(f"{value.dtype}{tuple(value.shape)}".encode())
        flat = value.detach().to("cpu").contiguous().reshape(-1)
        if flat.numel():
            digest.update(flat.view(torch.uint8).numpy().tobytes())
    else:
        digest.update(repr(value).encode())
    return digest.hexdigest()


class ImplSubject:
    """A ``module:attr`` implementation on a device: each kernel call on copies of the judge's tensors."""

    def __init__(self, spec: str, device: str) -> None:
        import torch

        from crossattn_sizing.impl import impl_from_spec

        self.spec = spec
        self.impl = impl_from_spec(spec, device)
        self.device = torch.device(device)  # where the kernels get their copies of the judge's tensors

    def ready(self) -> dict[str, Any]:
        """The ready line's content: what the implementation says about itself."""
        from crossattn_sizing.impl import provenance_lines

        return {"provenance": provenance_lines(self.impl)}

    def _decoded(self, req: dict[str, Any], *names: str) -> dict[str, Any]:
        """The named arguments of a request, as this worker's own copies on the kernels' device."""
        from crossattn_sizing.engine.tensors import decode_record

        return {name: decode_record(req[name], self.device) for name in names}

    def op_slot_mapping(self, req: dict[str, Any]) -> dict[str, Any]:
        """Answer ``slot_mapping``: the implementation's ``out``, with the inputs' fingerprints."""
        from crossattn_sizing.engine.tensors import encode

        inputs = self._decoded(req, "step")
        out = self._decoded(req, "out")["out"]
        self.impl.slot_mapping(step=inputs["step"], out=out)
        return {"out": encode(out), "inputs": fingerprints(inputs)}

    def op_write_kv(self, req: dict[str, Any]) -> dict[str, Any]:
        """Answer ``write_kv``: the caches as written, with the inputs' fingerprints."""
        from crossattn_sizing.engine.tensors import encode

        inputs = self._decoded(req, "key", "value", "step")
        caches = self._decoded(req, "key_cache", "value_cache")
        self.impl.write_kv(**inputs, **caches)
        return {**{name: encode(cache) for name, cache in caches.items()}, "inputs": fingerprints(inputs)}

    def op_paged_attention(self, req: dict[str, Any]) -> dict[str, Any]:
        """Answer ``paged_attention``: its answer, with the inputs' fingerprints."""
        from crossattn_sizing.engine.tensors import encode_answer

        inputs = self._decoded(req, "query", "key_cache", "value_cache", "step")
        answer = self.impl.paged_attention(**inputs)
        return {"answer": encode_answer(answer), "inputs": fingerprints(inputs)}

    def op_merge(self, req: dict[str, Any]) -> dict[str, Any]:
        """Answer ``merge``: its answer, with the inputs' fingerprints."""
        from crossattn_sizing.engine.tensors import encode_answer

        inputs = self._decoded(req, "outs", "lses")
        answer = self.impl.merge(**inputs)
        return {"answer": encode_answer(answer), "inputs": fingerprints(inputs)}


def fingerprints(inputs: dict[str, Any]) -> dict[str, str]:
    """``name -> fingerprint`` of every tensor and field of the inputs (``step.slots``, ``outs[1]``)."""
    from crossattn_sizing.engine.tensors import record_parts

    out: dict[str, str] = {}
    for name, value in inputs.items():
        for part, item in record_parts(name, value):
            out[part] = fingerprint(item)
    return out


def load_subject(kind: str, spec: str, device: str) -> PolicySubject | ImplSubject:
    """The subject ``--load KIND=SPEC`` names (``policy`` or ``impl``)."""
    if kind == POLICY:
        return PolicySubject(spec)
    if kind == IMPL:
        return ImplSubject(spec, device)
    raise ValueError(f"--load {kind}={spec}: KIND is policy or impl")
