"""SGLang's own admission rule, run in the worker: which requests a release admits, and how long they run.

The write side judges "every request the engine admits fits its own row", so
what is admitted must be the release's decision, not the harness's model of
it. The steps are :data:`~crossattn_sizing.engine.sglang.releases.ADMISSION`
(per release range, as data): ``TpModelWorker``'s limits (``max_req_len``,
``max_req_input_len``: the statements of ``__init__`` that set them where a
release computes them there, then ``get_worker_info``), the scheduler's input
check (``validate_input_length``) and its output cap
(``Scheduler.init_req_max_new_tokens``, with the KV allocator's
``max_new_tokens_for_memory`` where the release has one). Each runs from the
release's own file, under its real name and lines, on a stand-in ``self``
holding the server the property drew, and a stand-in request holding its ids
as a server does (the encoder placeholders and the prompt in
``origin_input_ids``, the prompt alone in ``origin_input_ids_unpadded``):
every field of each is declared, with the value a server gives it, in
:data:`~crossattn_sizing.engine.sglang.stand_in_fields.STAND_IN_FIELDS`.

Loaded the first time the write side asks (:func:`load`): a piece a tree lacks
or renamed makes the write side "not run", naming it, while the read side
still runs.
"""

from __future__ import annotations

import ast
import copy
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossattn_sizing.engine.sglang import stand_in_fields
from crossattn_sizing.engine.sglang.releases import SglangRange, Step
from crossattn_sizing.engine.sglang.run import PLATFORM, _method, _settings
from crossattn_sizing.engine.sglang.source import (
    SourceModule,
    bind,
    execute,
    find_class,
    parse_release_file,
    require_methods,
    take,
)

LIMITS_AT = (4, 5)
"""Where ``get_worker_info``'s tuple holds ``max_req_len`` and ``max_req_input_len`` (the scheduler
unpacks them from there in every release of the table; a declared stand-in)."""

LIMIT_ATTRIBUTES = ("max_req_len", "max_req_input_len")
"""The attributes ``TpModelWorker.__init__`` sets in releases that compute the limits there."""

_LOG = logging.getLogger("crossattn_sizing.sglang_release")  # the release's own warnings: to stderr


def _namespace(module: SourceModule, stand: dict[str, Any]) -> dict[str, Any]:
    """The names ``module``'s imports bind (stand-ins, the real standard library, or Missing) and its
    ``logger``: what a method compiled alone from it sees."""
    ns = {name: bind(name, source, attr, stand) for name, (source, attr) in module.imports.items()}
    ns["logger"] = _LOG
    return ns


def assignments_alone(
    module: SourceModule, step: Step, attributes: Sequence[str], parameters: bool = False
) -> Callable[..., None] | None:
    """The statements of ``step`` (a ``cls.method``, in practice an ``__init__``) that assign one of
    ``self.<attributes>``, compiled alone as one function at their own lines; None where the release
    assigns none of them there.

    The function takes ``self`` alone, or (``parameters``) the method's own parameters with their
    defaults, their annotations dropped: the statements read what the caller hands them, and nothing
    else of the method runs (its other statements would reach stand-ins).
    """
    cls, _, method = step.name.partition(".")
    init = next((n for n in find_class(module, cls).body
                 if isinstance(n, ast.FunctionDef) and n.name == method), None)  # fmt: skip
    if init is None:
        return None

    def assigns(node: ast.stmt) -> bool:
        targets = node.targets if isinstance(node, ast.Assign) else []
        return any(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                   and t.attr in attributes for t in targets)  # fmt: skip

    body = [n for n in init.body if assigns(n)]
    if not body:
        return None
    if parameters:
        args = copy.deepcopy(init.args)  # the parsed file stays as it was
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if arg is not None:
                arg.annotation = None
    else:
        args = ast.arguments(posonlyargs=[], args=[ast.arg("self")], kwonlyargs=[], kw_defaults=[],
                             defaults=[])  # fmt: skip
    fn = ast.FunctionDef(name="_alone", args=args, body=body, decorator_list=[], returns=None,
                         lineno=body[0].lineno, col_offset=0, end_lineno=body[-1].end_lineno,
                         end_col_offset=0)  # fmt: skip
    code = ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[]))
    ns: dict[str, Any] = {}
    exec(compile(code, str(module.path), "exec"), ns)  # the release's own statements, alone
    return ns["_alone"]


def _class_method(root: Path, step: Step, stand: dict[str, Any]) -> Callable[..., Any]:
    """``step`` (``cls.method``) compiled alone from its file; an :class:`AdapterGap` naming the class's
    ``file:line`` where the release lacks the method (renamed or moved)."""
    module = parse_release_file(root, step.file)
    cls, _, method = step.name.partition(".")
    require_methods(module, cls, (method,))
    return _method(module, cls, method, _namespace(module, stand))


@dataclass
class ReleaseAdmission:
    """One release's admission steps, each its own code (see the module docstring)."""

    limits_init: Callable[[Any], None] | None
    worker_info: Callable[[Any], Any]
    input_check: Callable[..., Any]
    output_cap: Callable[[Any, Any], Any]
    pool_budget: Callable[..., Any] | None
    ids_are_lists: bool
    """Whether the release's requests hold their ids as lists (0.5.12 and older) or ``array('q')``."""

    def limits(self, context_len: int, kv_capacity: int) -> tuple[int, int]:
        """``(max_req_len, max_req_input_len)`` the release's worker reports for this server."""
        worker = stand_in_fields.worker_self(context_len, kv_capacity)
        if self.limits_init is not None:
            self.limits_init(worker)
        info = self.worker_info(worker)
        return int(info[LIMITS_AT[0]]), int(info[LIMITS_AT[1]])

    def judge(
        self, limits: tuple[int, int], kv_capacity: int, request: tuple[int, int, int]
    ) -> dict[str, Any]:
        """``request`` = ``(E, prompt, max_new)`` as the release's scheduler takes it, under ``limits``
        (:meth:`limits`): ``refused`` (its own message, or None when admitted) and ``cap`` (the
        ``max_new_tokens`` it lets the request run to)."""
        max_req_len, max_req_input_len = limits
        e, p, max_new = request
        aborted: list[str] = []
        req = stand_in_fields.request(e, p, max_new, self.ids_are_lists, aborted.append)
        scheduler = stand_in_fields.scheduler_self(max_req_len, kv_capacity, self.pool_budget)
        self.output_cap(scheduler, req)  # runs first
        refused = self.input_check(req, max_req_input_len, False)  # no --allow-auto-truncate
        if refused is None and aborted:
            refused = str(aborted[0])
        return {"refused": refused, "cap": int(req.sampling_params.max_new_tokens)}


def admission_stand_ins() -> dict[str, Any]:
    """The run's stand-ins, with the settings getters the limit steps read (no DCP, default schedule)."""
    stand = _settings()
    stand["get_schedule"] = stand_in_fields.schedule_settings
    stand["page_interleave_shard_size"] = lambda *_: 1
    return stand


def load(root: Path, rng: SglangRange) -> ReleaseAdmission:
    """The release's admission steps from the files ``rng.admission`` names (an :class:`AdapterGap` naming
    a piece the tree lacks: the write side is then "not run")."""
    steps = rng.admission
    stand = admission_stand_ins()
    tp = parse_release_file(root, steps["limits"].file)
    check = parse_release_file(root, steps["input_check"].file)
    input_check = take(execute(check, stand, only=(steps["input_check"].name,), extra={"logger": _LOG}),
                       steps["input_check"].name, check)  # fmt: skip
    budget = steps.get("pool_budget")
    pool_budget = None
    if budget is not None and (root / budget.file).is_file():
        module = parse_release_file(root, budget.file)
        cls, _, method = budget.name.partition(".")
        if any(isinstance(n, ast.FunctionDef) and n.name == method for n in find_class(module, cls).body):
            pool_budget = _method(module, cls, method, {**_namespace(module, stand), **PLATFORM})
    init = steps.get("limits_init")
    return ReleaseAdmission(
        limits_init=None if init is None else assignments_alone(tp, init, LIMIT_ATTRIBUTES),
        worker_info=_class_method(root, steps["limits"], stand),
        input_check=input_check,
        output_cap=_class_method(root, steps["output_cap"], stand),
        pool_budget=pool_budget,
        ids_are_lists=rng.input_ids_are_lists,
    )


def run_admission(
    root: Path, rng: SglangRange, loaded: list[ReleaseAdmission], context_len: int, kv_capacity: int,
    requests: Sequence[tuple[int, int, int]],
) -> dict[str, Any]:
    """The ``admission`` op: the limits, and each ``(E, prompt, max_new)`` judged by the release's rule.

    ``{"verdict": "holds", "max_req_len", "max_req_input_len", "requests": [{"refused", "cap"}, ...]}``,
    or the "not run" verdict naming the piece (``loaded`` caches the steps across calls).
    """
    from crossattn_sizing.engine.adapter import not_run

    step = f"loading the admission steps ({', '.join(s.name for s in rng.admission.values())})"
    try:
        if not loaded:
            loaded.append(load(root, rng))
        admission = loaded[0]
        step = f"{rng.admission['limits'].name} (the scheduler's limits)"
        max_req_len, max_req_input_len = admission.limits(context_len, kv_capacity)
        step = (f"{rng.admission['output_cap'].name} and {rng.admission['input_check'].name} "
                "(a request's admission)")
        limits = (max_req_len, max_req_input_len)
        answers = [admission.judge(limits, kv_capacity, r) for r in requests]
    except Exception as exc:  # the adapter's gap, or the release's own code raising: not a verdict
        verdict = not_run(exc, step, root)
        verdict["reason"] = f"{rng.label()}: {verdict['reason']}"
        return verdict
    return {"verdict": "holds", "max_req_len": max_req_len, "max_req_input_len": max_req_input_len,
            "requests": answers}


__all__ = ["ReleaseAdmission", "admission_stand_ins", "assignments_alone", "load", "run_admission"]
