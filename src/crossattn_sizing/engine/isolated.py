"""A user's ``module:attr`` policy or implementation, run in a worker process and judged here.

The worker is the release workers' own (:class:`~crossattn_sizing.engine.client.EngineWorker`,
the loop of :mod:`crossattn_sizing.engine.worker` with ``--load``, tensors as
:mod:`crossattn_sizing.engine.tensors` sends them); what runs inside it is
:mod:`crossattn_sizing.engine.subject`. The proxies here stand where the user's
object stood, so every property, command and the plugin use them unchanged.

What isolation gives the judge:

- every verdict is computed here, from values the worker sent back: nothing
  the code under test does to its own memory, signal handlers, threads or
  modules (rebinding the harness's capacity check, say) reaches the judge;
- each call has a deadline (``--call-timeout``, ``CROSSATTN_CALL_TIMEOUT``):
  past it the worker's process group is killed and the case reads
  ``timed out after N s: <the call>``;
- a worker that exits (any status, ``os._exit`` included) or dies by a signal
  is that case's failure, naming the call and the status; the next call
  starts a fresh worker;
- inputs are read-only: the kernel works on copies, and the worker sends back
  a fingerprint of each input after the call; one that differs from the
  judge's own is a failure naming the tensor.

A policy's failures are :class:`~crossattn_sizing.base.errors.PolicyCallError`
(the policy is unusable, as when it raises in process); an implementation's
are ``AssertionError`` (the property's case failed, as a kernel raising does).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from crossattn_sizing.base import usercode
from crossattn_sizing.base.errors import NotExpressible, PolicyCallError, PolicyLoadError
from crossattn_sizing.base.processes import forget_child, register_child
from crossattn_sizing.base.threads import one_thread_unless_set
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.config_tile import ConfigTile
from crossattn_sizing.core.policies import not_a_sequence
from crossattn_sizing.engine.client import IMPORT_DEADLINE, CallTimeout, EngineCrash, EngineWorker
from crossattn_sizing.engine.install import Release
from crossattn_sizing.engine.subject import IMPL, POLICY, fingerprints
from crossattn_sizing.engine.tensors import Foreign, decode, decode_answer, encode_record, record_parts
from crossattn_sizing.impl.runner import WrongAnswer, check_facts
from crossattn_sizing.impl.step import AttentionStep, SlotStep, WriteStep
from crossattn_sizing.prove.batches import Answer, PackedWidths, packed_arrays


class InputChanged(AssertionError):
    """A kernel changed an input it was handed (read-only by the interface): the case's failure."""


class RaisedInWorker(Exception):
    """What the user's code raised in its worker, as the worker said it (``Type: message``)."""


FORK_MARGIN = 30.0
"""Seconds the judge waits past the deadline for a forking worker, which enforces the deadline itself."""


class CodeWorker(EngineWorker):
    """A worker that loads a user's ``module:attr`` (``--load KIND=SPEC``) instead of a release.

    Nothing is installed for it: a module its import misses is the user's to
    install, said once when it loads. It leads its own process group and has
    a deadline per request (:class:`~crossattn_sizing.engine.client.EngineWorker`).
    What it prints to stderr reaches the user's stderr, as it would in process.
    """

    echo_stderr = True

    def __init__(self, kind: str, spec: str, device: str, deadline: float) -> None:
        super().__init__(Release(None), device, records=False, deadline=deadline)
        self.start_deadline = max(deadline, IMPORT_DEADLINE)
        self.call_deadline = deadline
        self.forking = False  # set by the first crash or timeout: each call then runs in a forked child
        self.kind, self.spec = kind, spec
        register_child(self.close, "code")

    @property
    def label(self) -> str:
        """How error lines name the user's code: its kind and spec."""
        return f"{'sizing policy' if self.kind == POLICY else 'implementation'} {self.spec}"

    def command(self) -> list[str]:
        """The worker's command line: the loop with ``--load`` instead of a release."""
        cmd = [
            sys.executable,
            "-m",
            "crossattn_sizing.engine.worker",
            "--device",
            self.device,
            "--load",
            f"{self.kind}={self.spec}",
        ]
        if self.forking:
            cmd += ["--fork", repr(self.call_deadline)]
        # What the judge imports from, the worker imports from (a test's module, a folder on PYTHONPATH).
        for path in [os.getcwd(), *sys.path]:
            if path and os.path.isdir(path) and not path.startswith((sys.prefix, sys.base_prefix)):
                cmd += ["--path", path]
        return cmd

    def environment(self) -> dict[str, str]:
        """One OpenMP thread unless the user set a number: the judge waits while the worker computes,
        and a test case's small kernels gain nothing from threads, whose spin-waits on a busy machine
        made one KV write 90 ms instead of 0.1 ms (measured on 2 shared cores)."""
        env = super().environment()
        one_thread_unless_set(env)
        return env

    def start(self) -> dict[str, Any]:
        """Start the worker and load the user's code; a module that does not import is refused once."""
        if self.proc is not None and self.proc.poll() is None:
            return self.ready
        register_child(self.close, "code")  # again: ending the children forgets it, and a call restarts it

        def refuse(ready: dict[str, Any]) -> Exception:
            error = str(ready.get("error"))
            return PolicyLoadError(error.split(": ", 1)[1] if ready.get("kind") in LOAD_ERRORS else error)

        return self.start_once(refuse)

    def timeout_message(self, op: str, where: str = "") -> str:
        """A call that outlived the deadline, as the user reads it: the deadline, their code, the call."""
        return f"timed out after {self.call_deadline:g} s: {self.label}: {op}"

    def crashed(self) -> None:
        """The first call that kills the worker (or outlives the deadline) restarts it forking.

        Each later call runs in a child forked for it, which the worker kills at
        the deadline itself. Hypothesis shrinks a crash by running many more
        examples that crash; each then costs a fork, not a fresh worker's imports.
        """
        if not self.forking:
            self.forking = True
            self.deadline = self.call_deadline + FORK_MARGIN  # the worker's own limit comes first

    def refusal(self, op: str, reply: dict[str, Any]) -> Exception:  # type: ignore[override]
        """A worker's failure as the user's error: a timeout, a crash, or what their code raised."""
        kind = reply.get("kind")
        if kind == "TimedOut":
            return CallTimeout(self.timeout_message(op))
        if kind == "Died":
            return EngineCrash(f"{self.label}: {str(reply.get('error')).removeprefix('Died: ')}")
        return refusal(reply)


LOAD_ERRORS = ("PolicyLoadError", "PolicyCallError", "DeviceError")
"""Kinds of the harness's own errors a worker reports as loading failed: their message is the line."""


def refusal(reply: dict[str, Any]) -> Exception:
    """The exception a refused request stands for: the harness's refusal, or what the user's code raised."""
    error = str(reply.get("error"))
    kind = reply.get("kind")
    said = error.split(": ", 1)[1] if ": " in error else error
    if kind in LOAD_ERRORS:
        return PolicyCallError(said)
    if kind in ("NotExpressible",):
        return NotExpressible(said)
    return RaisedInWorker(error)


def decoded_widths(data: Any, name: str) -> tuple[Any, ...]:
    """A width answer as the worker sent its raw value (:func:`crossattn_sizing.engine.subject.bind_widths`),
    for the judge's own checks: a tuple of ints, or of ints and :class:`Said` items, which the judge
    refuses naming them; a value that is no list or tuple is refused here, its type named."""
    if isinstance(data, list):
        return tuple(data)
    if isinstance(data, dict) and "items" in data:
        return tuple(int(v, 16) if isinstance(v, str) else Said(v["said"]) for v in data["items"])  # hex
    if isinstance(data, dict) and "other" in data:
        raise not_a_sequence(str(data["other"]), str(data["said"]), name)
    raise PolicyCallError(f"{name}: its worker sent no width answer ({usercode.shown(data, as_repr=True)})")


class Said:
    """An item of a width answer that is no int, as the worker printed it: its ``repr`` is that text."""

    def __init__(self, said: str) -> None:
        self.said = said

    def __repr__(self) -> str:
        return self.said


class IsolatedPolicy:
    """A ``module:attr`` sizing policy asked through its worker; the judge checks each answer again."""

    def __init__(self, spec: str, deadline: float) -> None:
        self.spec = spec
        self.name = spec
        self.worker = CodeWorker(POLICY, spec, "cpu", deadline)
        ready = self.worker.start()
        self.expected_to_hold = bool(ready.get("expected_to_hold", True))
        self.summary = ready.get("summary") or f"{spec} (run in a worker process)"
        # Always batched (the worker asks a policy without a batch method one config at a time).
        self.widths_many = self._widths_many

    def __repr__(self) -> str:  # short: Hypothesis prints it in every falsifying example
        return f"IsolatedPolicy({self.spec!r})"

    def __call__(self, config: RunnerConfig) -> tuple[int, ...]:
        """The policy's widths for ``config``, asked of its worker and checked as in process."""
        try:
            result = self.worker.ask("widths", config=config.to_dict())
        except EngineCrash as exc:
            raise PolicyCallError(f"{exc} (the policy's worker process)") from None
        except RaisedInWorker as exc:
            raise PolicyCallError(f"sizing policy {self.spec} raised {exc}") from None
        return decoded_widths(result["widths"], f"sizing policy {self.spec}")

    def _widths_many(self, configs: Sequence[RunnerConfig]) -> Sequence[Answer]:
        try:
            if isinstance(configs, ConfigTile):  # a prove tile: its bases and packed lengths, not each config
                result = self.worker.ask("widths_many", tile=configs.to_dict())
            else:
                result = self.worker.ask("widths_many", configs=[c.to_dict() for c in configs])
        except EngineCrash:  # asked again one at a time, so the config that kills it is the one named
            out: list[Answer] = []
            for config in configs:
                try:
                    out.append(self(config))
                except PolicyCallError as exc:
                    out.append(exc)
                    break
            return out
        except RaisedInWorker as exc:
            raise PolicyCallError(f"sizing policy {self.spec}: widths_many raised {exc}") from None
        lens, flat, rest = packed_arrays(result)
        return PackedWidths(lens, flat, {i: self._batch_item(item) for i, item in rest.items()})

    def _batch_item(self, item: Any) -> tuple[int, ...] | Exception:
        """One config's answer from a batch, as the judge reads it: widths, or why there are none."""
        if isinstance(item, tuple):
            return item
        if "ok" in item:
            return refusal(item)
        name = f"sizing policy {self.spec}: widths_many"
        try:
            values = decoded_widths(item, name)
        except PolicyCallError as exc:
            return exc
        if all(type(v) is int for v in values):
            return tuple(values)
        return PolicyCallError(f"{name} answered {usercode.shown(values, as_repr=True)}, not ints")

    def close(self) -> None:
        """End the worker (the registry of children ends it at exit otherwise)."""
        self.worker.close()
        forget_child(self.worker.close)


def _tensor_facts(inputs: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``(name, " (shape [..], dtype ..)")`` for each tensor of the inputs, named as :func:`fingerprints`
    names them: a message shows a tensor by its facts, never by its values."""
    for name, value in inputs.items():
        for part, item in record_parts(name, value):
            if isinstance(item, torch.Tensor):
                dtype = str(item.dtype).removeprefix("torch.")
                yield part, f" (shape {list(item.shape)}, dtype {dtype})"


class IsolatedImpl:
    """A ``module:attr`` implementation whose four kernels run in its worker, on copies of the inputs.

    Each call sends the inputs, takes the outputs back into the judge's own
    buffers (the slot output, the caches) and compares the inputs'
    fingerprints after the call with the judge's: a kernel that changed one
    fails the case naming it.
    """

    def __init__(self, spec: str, device: torch.device | str, deadline: float) -> None:
        self.spec = spec
        self.name = spec
        self.device = torch.device(device)
        self.worker = CodeWorker(IMPL, spec, self.device.type, deadline)
        self.provenance = list(self.worker.start().get("provenance") or [])

    def __repr__(self) -> str:
        return f"IsolatedImpl({self.spec!r}, device={str(self.device)!r})"

    def provenance_lines(self) -> list[str]:
        """What the implementation reported about itself when it loaded."""
        return self.provenance

    def _call(self, op: str, inputs: dict[str, Any], **buffers: Any) -> dict[str, Any]:
        payload = {name: encode_record(value) for name, value in {**inputs, **buffers}.items()}
        try:
            result = self.worker.ask(op, **payload)
        except RaisedInWorker as exc:
            raise AssertionError(f"implementation {self.spec}: {op} raised {exc}") from None
        mine = fingerprints(inputs)
        theirs = result.get("inputs", {})
        changed = [name for name, digest in mine.items() if theirs.get(name) != digest]
        if changed:
            # The contract broken, as by an answer in no usable form: the test's later examples are not
            # run (shrinking would rerun the kernel for nothing but a smaller copy of the same breach).
            self.worker.broke()
            shapes = dict(_tensor_facts(inputs))
            named = ", ".join(f"{name}{shapes.get(name, '')}" for name in changed[:4])
            more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
            raise InputChanged(
                f"implementation {self.spec}: {op} changed its input {named}{more} "
                "(inputs are read-only; the verdict uses the harness's own copy)"
            )
        return result

    def slot_mapping(self, *, step: SlotStep, out: torch.Tensor) -> None:
        """Slot mapping in the worker; ``out`` filled from its answer."""
        result = self._call("slot_mapping", {"step": step}, out=out)
        out.copy_(_same_shape("slot_mapping", "out", decode(result["out"], out.device), out, self.spec))

    def write_kv(
        self,
        *,
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        step: WriteStep,
    ) -> None:
        """The KV write in the worker; the caches filled from its answer."""
        result = self._call(
            "write_kv",
            {"key": key, "value": value, "step": step},
            key_cache=key_cache,
            value_cache=value_cache,
        )
        for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
            cache.copy_(_same_shape("write_kv", name, decode(result[name], cache.device), cache, self.spec))

    def paged_attention(
        self, *, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Paged attention in the worker; its ``(out, lse)`` checked before it is used."""
        inputs = {"query": query, "key_cache": key_cache, "value_cache": value_cache, "step": step}
        data = self._call("paged_attention", inputs)["answer"]
        parts = data.get("tuple") if isinstance(data, dict) else None
        if not (isinstance(parts, list) and len(parts) == 2 and all("tensor" in p for p in parts)):
            self.worker.broke()
            raise WrongAnswer(
                f"implementation {self.spec}: paged_attention returned {_kind(decode_answer(data))}, "
                "not the tuple (out, lse) of tensors"
            )
        self._check_facts("paged attention", zip(("out", "lse"), parts, strict=True), query.device)
        return decode_answer(data, query.device)

    def _check_facts(self, method: str, parts: Any, device: torch.device) -> None:
        """The facts the worker read off each returned tensor (device, dtype, ``requires_grad``), checked
        before anything is decoded; a violation is the case's failure and ends the test's examples."""
        try:
            for part, data in parts:
                check_facts(self.spec, method, part, data["tensor"], device)
        except WrongAnswer:
            self.worker.broke()
            raise

    def merge(self, *, outs: Sequence[torch.Tensor], lses: Sequence[torch.Tensor]) -> torch.Tensor:
        """The DCP merge in the worker; its answer checked to be one tensor."""
        device = outs[0].device if outs else torch.device("cpu")
        data = self._call("merge", {"outs": list(outs), "lses": list(lses)})["answer"]
        if not (isinstance(data, dict) and "tensor" in data):
            self.worker.broke()
            raise WrongAnswer(f"implementation {self.spec}: merge returned {_kind(decode_answer(data))}, "
                              "not a tensor")  # fmt: skip
        self._check_facts("merge", [("out", data)], device)
        return decode_answer(data, device)

    def close(self) -> None:
        """End the worker and forget it at exit."""
        self.worker.close()
        forget_child(self.worker.close)


def _kind(answer: object) -> str:
    """What a kernel returned, said briefly: ``a list ([1.0, ...])``, ``a tuple of 3``."""
    if isinstance(answer, Foreign):
        return f"a {answer.type_name} ({answer.said})"
    if isinstance(answer, tuple):
        return f"a tuple of {len(answer)} ({', '.join(_kind(a) for a in answer)})"
    if isinstance(answer, torch.Tensor):
        return f"a tensor {list(answer.shape)}"
    return f"a {type(answer).__name__}"


def _same_shape(op: str, name: str, got: torch.Tensor, buffer: torch.Tensor, spec: str) -> torch.Tensor:
    """The output the worker sent back, refused when it is no longer the buffer's shape and dtype."""
    if got.shape != buffer.shape or got.dtype != buffer.dtype:
        raise InputChanged(
            f"implementation {spec}: {op} left its output {name} as {got.dtype} {list(got.shape)}, "
            f"handed over as {buffer.dtype} {list(buffer.shape)}"
        )
    return got


_SUBJECTS: dict[tuple[str, str, str, float], Any] = {}
"""One proxy (one worker) per subject for the process: verify asks about a policy from several places."""


def isolated_policy(spec: str, deadline: float) -> IsolatedPolicy:
    """The (shared) proxy of the ``module:attr`` policy ``spec``, its worker started."""
    key = (POLICY, spec, "cpu", deadline)
    if key not in _SUBJECTS:
        _SUBJECTS[key] = IsolatedPolicy(spec, deadline)
    return _SUBJECTS[key]


def isolated_impl(spec: str, device: torch.device | str, deadline: float) -> IsolatedImpl:
    """The (shared) proxy of the ``module:attr`` implementation ``spec`` on ``device``, its worker started."""
    key = (IMPL, spec, str(torch.device(device)), deadline)
    if key not in _SUBJECTS:
        _SUBJECTS[key] = IsolatedImpl(spec, device, deadline)
    return _SUBJECTS[key]
