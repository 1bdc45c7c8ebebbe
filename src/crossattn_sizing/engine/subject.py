"""A user's policy or implementation inside its worker process: loaded once, asked per request.

Why a worker: the code under test may exit, crash, hang, start threads,
replace signal handlers or rebind the harness's own functions. In its own
process none of that reaches the judge, which computes every verdict from
the values sent back (:mod:`crossattn_sizing.engine.isolated`). The loop is
the release worker's (:mod:`crossattn_sizing.engine.worker`, ``--load``); this
module makes the ``op`` table it dispatches to.

The answer is read where the code under test cannot rewrite it: each op
captures the user's *raw* return value and serialises it with code bound
before the user's module is imported (the locals of :func:`policy_ops` and
:func:`impl_ops`, the encoders of :func:`~crossattn_sizing.engine.tensors.bind_encoders`),
never with a module attribute the user could rebind at import. The worker
checks nothing of a width answer's meaning: a list or tuple of ints crosses
as a packed array, anything else as its type and ``repr``, and the judge
alone decides whether it is an answer (:func:`~crossattn_sizing.engine.isolated.decoded_widths`).
Only what needs the user's own objects is checked here: that a policy left
its config alone, and the fingerprint of each input a kernel was handed, after
the call (the judge compares it with its own).
"""

from __future__ import annotations

import base64
import hashlib
import struct
from collections.abc import Callable
from typing import Any

from crossattn_sizing.base import usercode
from crossattn_sizing.base.errors import HarnessError, PolicyCallError
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.config_tile import ConfigTile
from crossattn_sizing.core.policies import changed_fields, policy_from_spec, private_copy

POLICY, IMPL = "policy", "impl"

Ops = dict[str, Callable[[dict[str, Any]], Any]]
"""``op name -> the call answering it``: the worker's dispatch table, fixed before the user's import."""

INT64 = (-(2**63), 2**63 - 1)
"""What a packed width holds; an int past it crosses as its decimal digits (the judge refuses it anyway)."""


def bind_failure() -> Callable[[BaseException], dict[str, Any]]:
    """A protocol failure ``{"ok": false, "error", "kind"}`` for an exception, built with locals bound now
    (no module attribute the user could rebind turns a failure into ``ok``)."""
    type_, str_ = type, str

    def fail(exc: BaseException) -> dict[str, Any]:
        name = type_(exc).__name__
        try:
            text = str_(exc)
        except BaseException:  # a hostile __str__
            text = "<a message that cannot be printed>"
        return {"ok": False, "error": f"{name}: {text}", "kind": name}

    return fail


def bind_widths() -> Callable[[Any, str], Any]:
    """``raw(answer, name)``: a width answer as it crosses, from its raw value, with locals bound now.

    A list or tuple of ints in int64 is a tuple of ints (packed by the
    caller); a list or tuple holding anything else is ``{"items": [...]}``,
    each int in hex (any length) and each other item as ``{"said": repr}``; any
    other value is ``{"other": type name, "said": repr}``. A subclass of list
    or tuple is read by its own ``__iter__`` (the user's code, which may raise).
    """
    type_, int_, str_, repr_, tuple_, list_, hex_ = type, int, str, repr, tuple, list, hex
    isinstance_, all_ = isinstance, all
    lo, hi = INT64
    call, shown = usercode.call, usercode.shown

    def said(value: Any) -> str:
        try:
            return str_(repr_(value))[: usercode.MAX_SAID]
        except BaseException:  # a hostile __repr__
            return f"<{type_(value).__name__} that cannot be printed>"

    def raw(answer: Any, name: str) -> Any:
        kind = type_(answer)
        if kind is not tuple_ and kind is not list_:
            if not isinstance_(answer, (tuple_, list_)):
                return {"other": shown(kind.__name__, "type"), "said": said(answer)}
            answer = call(tuple_, answer, what=f"{name}: reading its answer")
        values = tuple_(answer)
        if all_(type_(v) is int_ and lo <= v <= hi for v in values):
            return values
        # hex: an int of any length crosses (decimal text past sys.get_int_max_str_digits() raises)
        return {"items": [hex_(v) if type_(v) is int_ else {"said": said(v)} for v in values]}

    return raw


def bind_packing() -> Callable[[list[Any]], dict[str, Any]]:
    """``pack(items)``: a batch of width answers as one packed int64 array, with locals bound now.

    ``items`` are tuples of ints (:func:`bind_widths`) or protocol dicts (a
    failure, or a value that is no tuple of ints). The tuples cross as one
    little-endian int64 array and their lengths as an int32 array (-1 where
    the item is in ``rest``): a ``prove`` batch of thousands of configs is
    two strings, not thousands of JSON lists.
    """
    pack, b64 = struct.pack, base64.b64encode
    type_, tuple_, len_, str_, enumerate_ = type, tuple, len, str, enumerate

    def packed(items: list[Any]) -> dict[str, Any]:
        lens: list[int] = []
        flat: list[int] = []
        rest: dict[str, Any] = {}
        for i, item in enumerate_(items):
            if type_(item) is tuple_:
                lens.append(len_(item))
                flat.extend(item)
            else:
                lens.append(-1)
                rest[str_(i)] = item
        return {"lens": b64(pack(f"<{len_(lens)}i", *lens)).decode("ascii"),
                "q": b64(pack(f"<{len_(flat)}q", *flat)).decode("ascii"), "rest": rest}  # fmt: skip

    return packed


def policy_ops(spec: str) -> tuple[Ops, dict[str, Any]]:
    """The ops answering for the ``module:attr`` policy ``spec``, and its ready line's content.

    Everything the ops call is bound to a local here before
    :func:`~crossattn_sizing.core.policies.policy_from_spec` imports the
    user's module: a policy that rebinds the harness's width checks, its
    config copy or the protocol's encoders at import changes only its own
    copies, never what its worker sends.
    """
    raw, packed, fail = bind_widths(), bind_packing(), bind_failure()
    copy, changed, from_dict, call = private_copy, changed_fields, RunnerConfig.from_dict, usercode.call
    tile_from = ConfigTile.from_dict
    callable_, isinstance_, list_, tuple_ = callable, isinstance, list, tuple
    base_exception, error, harness_error = BaseException, PolicyCallError, HarnessError
    name = f"sizing policy {spec}"
    policy = policy_from_spec(spec)  # the user's module is imported here, after every binding above
    found = getattr(policy, "widths_many", None)
    many: Callable[..., Any] | None = found if callable_(found) else None

    def one(config: RunnerConfig) -> Any:
        given = copy(config)
        try:  # the harness's own errors say what they mean (NotExpressible: a config it cannot be asked)
            answer = call(policy, given, what=name, passthrough=(harness_error,))
        except error as exc:  # the config it could not answer, named as in the judge's own call
            raise error(f"{exc} (called with one RunnerConfig: {config.describe()})") from None
        altered = changed(given, config)
        if altered:
            raise error(f"{name} changed the RunnerConfig it was given ({altered}); "
                        f"a policy must not modify its config (called with {config.describe()})")  # fmt: skip
        return raw(answer, name)

    def item(config: RunnerConfig) -> Any:
        try:
            return one(config)
        except Exception as exc:  # this config's answer is the failure; the batch goes on
            return fail(exc)

    def widths(req: dict[str, Any]) -> dict[str, Any]:
        answer = one(from_dict(req["config"]))
        return {"widths": list_(answer) if isinstance_(answer, tuple_) else answer}

    def widths_many(req: dict[str, Any]) -> dict[str, Any]:
        # a prove tile crosses as its bases and packed lengths (ConfigTile), any other batch config by config
        configs = tile_from(req["tile"]) if "tile" in req else [from_dict(c) for c in req["configs"]]
        if many is None:  # one call each, here in the worker: one round trip per batch, not per config
            return packed([item(c) for c in configs])
        batch = many
        answers = call(lambda: list_(batch(configs)), what=f"{name}: widths_many")
        return packed([fail(a) if isinstance_(a, base_exception) else raw(a, f"{name}: widths_many")
                       for a in answers])  # fmt: skip

    expected = getattr(policy, "expected_to_hold", True)
    summary = getattr(policy, "summary", None)
    ready = {
        "batch": many is not None,
        "expected_to_hold": expected if isinstance_(expected, bool) else True,
        "summary": summary if isinstance_(summary, str) else None,
    }
    return {"widths": widths, "widths_many": widths_many}, ready


def bind_fingerprint(encode: Callable[[Any], dict[str, Any]]) -> Callable[[Any], str]:
    """``fingerprint(value)``: a digest of a tensor (dtype, shape, bytes, as ``encode`` reads them) or of
    a plain value's repr: what "unchanged" compares. The judge and a worker use the same function."""
    blake2b, type_, repr_, tuple_ = hashlib.blake2b, type, repr, tuple
    import torch

    tensor_type = torch.Tensor

    def fingerprint(value: Any) -> str:
        digest = blake2b(digest_size=16)
        if type_(value) is tensor_type:
            data = encode(value)
            digest.update(f"{data['dtype']}{tuple_(data['shape'])}".encode())
            digest.update(data.get("b64", "meta").encode())
        else:
            digest.update(repr_(value).encode())
        return digest.hexdigest()

    return fingerprint


def _judge_fingerprint() -> Callable[[Any], str]:
    from crossattn_sizing.engine.tensors import encode

    return bind_fingerprint(encode)


def fingerprints(inputs: dict[str, Any], fingerprint: Callable[[Any], str] | None = None) -> dict[str, str]:
    """``name -> fingerprint`` of every tensor and field of the inputs (``step.slots``, ``outs[1]``)."""
    from crossattn_sizing.engine.tensors import record_parts

    digest = fingerprint or _judge_fingerprint()
    out: dict[str, str] = {}
    for name, value in inputs.items():
        for part, item in record_parts(name, value):
            out[part] = digest(item)
    return out


def impl_ops(spec: str, device: str) -> tuple[Ops, dict[str, Any]]:
    """The ops answering for the ``module:attr`` implementation ``spec`` on ``device``, and its ready line.

    Each kernel runs on this worker's copies of the judge's tensors; what it
    wrote (the slot output, the caches) or returned crosses as raw bytes with
    its facts (dtype, shape, device, ``requires_grad``), encoded by functions
    bound here before the user's import, with the fingerprint of each input
    after the call. The judge checks the facts and the values.
    """
    import torch

    from crossattn_sizing.engine.tensors import bind_encoders, decode_record, record_parts
    from crossattn_sizing.impl import impl_from_spec, provenance_lines

    encode, encode_answer = bind_encoders()
    fingerprint = bind_fingerprint(encode)
    decoded, parts, lines = decode_record, record_parts, provenance_lines
    where = torch.device(device)  # where the kernels get their copies of the judge's tensors
    impl = impl_from_spec(spec, device)  # the user's module is imported here, after every binding above

    def args(req: dict[str, Any], *names: str) -> dict[str, Any]:
        return {name: decoded(req[name], where) for name in names}

    def prints(inputs: dict[str, Any]) -> dict[str, str]:
        return {part: fingerprint(item) for name, value in inputs.items()
                for part, item in parts(name, value)}  # fmt: skip

    def slot_mapping(req: dict[str, Any]) -> dict[str, Any]:
        inputs, out = args(req, "step"), args(req, "out")["out"]
        impl.slot_mapping(step=inputs["step"], out=out)
        return {"out": encode(out), "inputs": prints(inputs)}

    def write_kv(req: dict[str, Any]) -> dict[str, Any]:
        inputs, caches = args(req, "key", "value", "step"), args(req, "key_cache", "value_cache")
        impl.write_kv(**inputs, **caches)
        return {**{name: encode(cache) for name, cache in caches.items()}, "inputs": prints(inputs)}

    def paged_attention(req: dict[str, Any]) -> dict[str, Any]:
        inputs = args(req, "query", "key_cache", "value_cache", "step")
        return {"answer": encode_answer(impl.paged_attention(**inputs)), "inputs": prints(inputs)}

    def merge(req: dict[str, Any]) -> dict[str, Any]:
        inputs = args(req, "outs", "lses")
        return {"answer": encode_answer(impl.merge(**inputs)), "inputs": prints(inputs)}

    ops: Ops = {"slot_mapping": slot_mapping, "write_kv": write_kv, "paged_attention": paged_attention,
                "merge": merge}  # fmt: skip
    return ops, {"provenance": lines(impl)}


def load_subject(kind: str, spec: str, device: str) -> tuple[Ops, dict[str, Any]]:
    """The op table and ready line of the subject ``--load KIND=SPEC`` names (``policy`` or ``impl``)."""
    if kind == POLICY:
        return policy_ops(spec)
    if kind == IMPL:
        return impl_ops(spec, device)
    raise ValueError(f"--load {kind}={spec}: KIND is policy or impl")

