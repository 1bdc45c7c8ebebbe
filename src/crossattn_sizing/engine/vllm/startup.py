"""Run the batches vLLM's ModelRunner V2 builds for itself at start-up: the profile run and the dummy runs.

Before any request arrives the runner lays out batches of its own: the
memory profile run (``profile_run`` -> ``_dummy_run(max_num_tokens)``), the
warm-up and CUDA-graph capture runs (``_dummy_run(n)`` and
``prepare_inputs_to_capture``, which build ``InputBatch.make_dummy(min(n,
max_num_reqs), n)`` for each capture size ``n``). Those batches read the same
block tables through the same kernels as served ones.

As :mod:`.sizing_exec` does for the sizing, the methods are taken from the
release's files (``model_runner.py``, ``input_batch.py``, ``block_table.py``,
``model_states/encoder_decoder.py``) and compiled on their own, under their
real file names and line numbers, so what runs is the release's code:

- ``GPUModelRunner._dummy_run`` up to the model forward: how many dummy
  requests, and how many tokens each is scheduled;
- ``InputBatch.make_dummy``: the lengths (``seq_lens``, ``query_start_loc``)
  the attention metadata is built from;
- ``BlockTables.get_dummy_slot_mappings``: the slots a dummy batch writes;
- the expression ``EncoderDecoderModelState.__init__`` assigns to
  ``max_encoder_len``: the encoder length every request gets at capture and warm-up.

What stands in is declared in :data:`STAND_INS` (per name the release reads)
and :func:`runner_self` (the runner's attributes); anything else the code
reaches raises :class:`~crossattn_sizing.engine.adapter.StandInReached`
naming it, a "not run" verdict, never a made-up length. This module imports
nothing of the engine: it is given the files' text.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import CodeType, SimpleNamespace
from typing import Any

from crossattn_sizing.engine.adapter import StandInReached
from crossattn_sizing.engine.vllm.quirks import StandIn

RUNNER_FILE = "vllm/v1/worker/gpu/model_runner.py"
BATCH_FILE = "vllm/v1/worker/gpu/input_batch.py"
TABLE_FILE = "vllm/v1/worker/gpu/block_table.py"
ENC_DEC_FILE = "vllm/v1/worker/gpu/model_states/encoder_decoder.py"
FILES = (RUNNER_FILE, BATCH_FILE, TABLE_FILE, ENC_DEC_FILE)
"""The release files the start-up batches are run from (paths inside the wheel)."""

PAD_SLOT_ID = -1
"""``vllm.v1.attention.backends.utils.PAD_SLOT_ID`` (-1 in every release 0.19.0 .. 0.34.0)."""


class StartupSourceError(Exception):
    """A start-up method is not where the adapter looks for it (the message names file and class)."""


class _Forward(Exception):
    """Raised by the stand-in ``execute_model``: the dummy run reached the model forward."""

    def __init__(self, scheduler_output: Any, kwargs: Mapping[str, Any]) -> None:
        super().__init__("model forward reached")
        self.scheduler_output = scheduler_output
        self.kwargs = dict(kwargs)


class _SchedulerOutput(SimpleNamespace):
    """Stand-in for ``vllm.v1.core.sched.output.SchedulerOutput``: ``make_empty`` and the fields set on it."""

    @classmethod
    def make_empty(cls) -> _SchedulerOutput:
        return cls(total_num_scheduled_tokens=0, num_scheduled_tokens={}, scheduled_encoder_inputs={})


def _uuids() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"{next(counter):032x}"


STAND_INS: dict[str, tuple[Callable[[], Any], str]] = {
    "SchedulerOutput": (lambda: _SchedulerOutput, "make_empty() and the fields _dummy_run sets on it"),
    "random_uuid": (_uuids, "distinct request-id suffixes (only names, never lengths)"),
    "PAD_SLOT_ID": (lambda: PAD_SLOT_ID, "-1, its value in every release"),
}
"""Module-level names the start-up methods read that the harness supplies: ``name -> (make, why)``.
``np`` and ``torch`` are the real ones; any other name is :class:`_Missing`."""


class _Missing:
    """A module-level name the start-up code reads that has no stand-in: any use is "not run"."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        raise StandInReached(f"{self._name}.{attr}", "attribute read")

    def __call__(self, *_: Any, **__: Any) -> Any:
        raise StandInReached(self._name, "called")


@dataclass(frozen=True)
class Method:
    """One release method compiled on its own: its code and where it is."""

    path: str
    line: int
    code: CodeType
    name: str
    global_names: tuple[str, ...]


def _strip(func: ast.FunctionDef) -> None:
    """Drop decorators (``torch.inference_mode``, ``step_eplb_after``) and annotations: not the layout."""
    func.decorator_list = []
    func.returns = None
    for arg in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]:
        arg.annotation = None
    for extra in (func.args.vararg, func.args.kwarg):
        if extra is not None:
            extra.annotation = None


def _find(tree: ast.Module, path: str, class_name: str, name: str) -> tuple[ast.ClassDef, ast.FunctionDef]:
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if cls is None:
        raise StartupSourceError(f"{path}: no class {class_name}")
    func = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if func is None:
        raise StartupSourceError(f"{path}:{cls.lineno}: {class_name} has no {name}")
    return cls, func


def compile_method(text: str, path: str, class_name: str, name: str) -> Method:
    """``class_name.name`` out of the module ``text``, compiled alone under ``path`` and its own lines."""
    tree = ast.parse(text, filename=path)
    _, func = _find(tree, path, class_name, name)
    _strip(func)
    stored = {a.arg for a in [*func.args.args, *func.args.kwonlyargs]}
    loads: list[str] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                stored.add(node.id)
            elif node.id not in loads:
                loads.append(node.id)
    builtins = set(dir(__builtins__)) if not isinstance(__builtins__, dict) else set(__builtins__)
    names = tuple(n for n in loads if n not in stored and n not in builtins)
    code = compile(ast.Module(body=[func], type_ignores=[]), path, "exec")
    return Method(path, func.lineno, code, name, names)


def bind_method(method: Method) -> Callable[..., Any]:
    """The compiled method as a function, its module-level names bound: np, torch, :data:`STAND_INS`."""
    import numpy as np
    import torch

    namespace: dict[str, Any] = {"__name__": "crossattn_sizing_engine_startup"}
    for name in method.global_names:
        if name in ("np", "numpy"):
            namespace[name] = np
        elif name == "torch":
            namespace[name] = torch
        elif name in STAND_INS:
            namespace[name] = STAND_INS[name][0]()
        else:
            namespace[name] = _Missing(name)
    exec(method.code, namespace)
    func: Callable[..., Any] = namespace[method.name]
    return func


@dataclass(frozen=True)
class EncoderLength:
    """The expression ``EncoderDecoderModelState.__init__`` assigns to ``self.max_encoder_len``."""

    path: str
    line: int
    code: CodeType


def compile_encoder_length(text: str, path: str) -> EncoderLength:
    """The right-hand side of the release's ``self.max_encoder_len = ...``, to evaluate on a stand-in."""
    tree = ast.parse(text, filename=path)
    _, init = _find(tree, path, "EncoderDecoderModelState", "__init__")
    for node in ast.walk(init):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Attribute)
            and node.targets[0].attr == "max_encoder_len"
        ):
            return EncoderLength(path, node.lineno, compile(ast.Expression(node.value), path, "eval"))
    where = f"{path}:{init.lineno}"
    raise StartupSourceError(f"{where}: EncoderDecoderModelState.__init__ sets no max_encoder_len")


@dataclass(frozen=True)
class StartupSource:
    """One release's start-up methods, compiled."""

    version: str
    dummy_run: Method
    make_dummy: Method
    dummy_slots: Method
    encoder_length: EncoderLength | None

    @classmethod
    def from_texts(cls, version: str, texts: Mapping[str, str], root: str = "") -> StartupSource:
        """Compile from ``{file: text}`` (:data:`FILES`); ``root`` prefixes the reported paths."""

        def where(rel: str) -> str:
            return f"{root.rstrip('/')}/{rel}" if root else rel

        missing = [f for f in (RUNNER_FILE, BATCH_FILE, TABLE_FILE) if f not in texts]
        if missing:
            raise StartupSourceError(f"{missing[0]}: not in vLLM {version} (no start-up batch to run)")
        enc = texts.get(ENC_DEC_FILE)
        return cls(
            version,
            compile_method(texts[RUNNER_FILE], where(RUNNER_FILE), "GPUModelRunner", "_dummy_run"),
            compile_method(texts[BATCH_FILE], where(BATCH_FILE), "InputBatch", "make_dummy"),
            compile_method(texts[TABLE_FILE], where(TABLE_FILE), "BlockTables", "get_dummy_slot_mappings"),
            compile_encoder_length(enc, where(ENC_DEC_FILE)) if enc is not None else None,
        )


@dataclass(frozen=True)
class Settings:
    """What shapes the start-up batches: the engine's settings the runner reads."""

    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    capture_sizes: tuple[int, ...]
    max_source_positions: int | None = None
    num_kv_cache_groups: int = 1


@dataclass(frozen=True)
class DummyBatch:
    """One start-up batch as the release laid it out."""

    purpose: str
    """``profile`` or ``capture N`` (warm-up and graph capture of ``N`` tokens)."""
    num_tokens: int
    scheduled: tuple[int, ...]
    """Tokens ``_dummy_run`` scheduled per dummy request."""
    seq_lens: tuple[int, ...]
    """``InputBatch.make_dummy``'s ``seq_lens``: the lengths the attention kernel is handed, per request."""
    slots: tuple[int, ...]
    """The first group's dummy slot mapping over the batch's tokens (what the KV write writes)."""
    where: str
    """``file:line`` of the release statement that set the lengths (``make_dummy``'s ``seq_lens``)."""
    attention: bool = True
    """Whether the run builds attention metadata (the profile's ``skip_attn`` does not: no kernel reads)."""


def runner_self(settings: Settings) -> StandIn:
    """The ``GPUModelRunner`` ``_dummy_run`` reads, up to its model forward (``execute_model`` stands in)."""

    def execute_model(scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        raise _Forward(scheduler_output, kwargs)

    @contextlib.contextmanager
    def no_lora(*_: Any, **__: Any) -> Any:
        yield

    return StandIn(
        "GPUModelRunner",
        max_num_reqs=settings.max_num_seqs,
        max_num_tokens=settings.max_num_batched_tokens,
        max_model_len=settings.max_model_len,
        decode_query_len=1,
        speculator=None,
        speculative_config=None,
        kv_connector=StandIn("kv_connector", set_disabled=lambda _flag: None),
        is_first_pp_rank=True,
        intermediate_tensors=None,
        lora_config=None,
        maybe_dummy_run_with_lora=no_lora,
        execute_model=execute_model,
    )


def _buffers(settings: Settings) -> StandIn:
    import torch

    n, t = settings.max_num_seqs, settings.max_num_batched_tokens
    return StandIn(
        "InputBuffers",
        device=torch.device("cpu"),
        seq_lens=torch.zeros(n, dtype=torch.int32),
        query_start_loc=torch.zeros(n + 1, dtype=torch.int32),
        input_ids=torch.zeros(t, dtype=torch.int32),
        positions=torch.zeros(t, dtype=torch.int64),
        is_padding=torch.zeros(t, dtype=torch.bool),
        dcp_local_seq_lens=torch.zeros(n, dtype=torch.int32),
    )


def seq_lens_line(text: str) -> int | None:
    """The line of ``make_dummy`` that first writes ``input_buffers.seq_lens`` (None: it has none)."""
    tree = ast.parse(text)
    _, func = _find(tree, BATCH_FILE, "InputBatch", "make_dummy")
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign):
            targets = [node.target]
        else:
            continue
        for t in targets:
            value = t.value if isinstance(t, ast.Subscript) else None
            if isinstance(value, ast.Attribute) and value.attr == "seq_lens":
                return node.lineno
    return None


class StartupRun:
    """The start-up methods of one release bound once, run for many settings."""

    def __init__(self, source: StartupSource, seq_lens_at: int | None = None) -> None:
        self.source = source
        self._dummy_run = bind_method(source.dummy_run)
        self._make_dummy = bind_method(source.make_dummy)
        self._slots = bind_method(source.dummy_slots)
        line = seq_lens_at if seq_lens_at is not None else source.make_dummy.line
        self.where = f"{source.make_dummy.path}:{line}"

    def scheduled(self, settings: Settings, num_tokens: int, **kwargs: Any) -> tuple[int, ...]:
        """Tokens per dummy request as the release's ``_dummy_run(num_tokens)`` schedules them."""
        try:
            self._dummy_run(runner_self(settings), num_tokens, **kwargs)
        except _Forward as reached:
            return tuple(int(v) for v in reached.scheduler_output.num_scheduled_tokens.values())
        path = self.source.dummy_run.path
        raise StartupSourceError(f"{path}: _dummy_run returned before its model forward")

    def batch(
        self, settings: Settings, purpose: str, num_tokens: int, attention: bool = True, **kwargs: Any
    ) -> DummyBatch:
        """The dummy batch of ``num_tokens``: ``_dummy_run``'s split, then ``make_dummy``'s lengths and slots.

        ``execute_model`` hands ``make_dummy`` ``batch_desc.num_reqs or num_reqs`` requests, ``num_reqs`` the
        scheduler output's; the stand-in dispatch is eager (no request padding: ``batch_desc.num_reqs`` None),
        and a FULL capture pads to ``min(n, max_num_seqs)``, the same number.
        """
        import torch

        scheduled = self.scheduled(settings, num_tokens, **kwargs)
        buffers = _buffers(settings)
        self._make_dummy(lambda **kw: SimpleNamespace(**kw), len(scheduled), sum(scheduled), buffers)
        seq_lens = tuple(int(x) for x in buffers.seq_lens[: len(scheduled)].tolist())
        table = StandIn(
            "BlockTables",
            slot_mappings=torch.full(
                (settings.num_kv_cache_groups, settings.max_num_batched_tokens), 7, dtype=torch.int64
            ),
        )
        slots = self._slots(table, sum(scheduled))
        written = tuple(int(s) for s in slots[0].tolist())
        return DummyBatch(purpose, sum(scheduled), scheduled, seq_lens, written, self.where, attention)

    def batches(self, settings: Settings) -> list[DummyBatch]:
        """Every start-up batch, in the order a server builds them.

        The profile run (``profile_run``: ``_dummy_run(max_num_batched_tokens, skip_attn=True)``) builds no
        attention metadata, so its lengths reach no kernel (``attention`` False). The warm-up runs
        ``_dummy_run(max_num_batched_tokens)`` (the end of the default compile range, which
        ``compile_or_warm_up_model`` adds as a warm-up size), each capture size ``n`` (graph capture lays
        out ``make_dummy(min(n, max_num_seqs), n)``, the split ``_dummy_run(n)`` makes) and
        ``_dummy_run(min(max_num_seqs, max_num_batched_tokens))`` (the sampler warm-up) run attention.
        """
        b, n = settings.max_num_batched_tokens, settings.max_num_seqs
        out = [self.batch(settings, "profile", b, attention=False, skip_attn=True, is_profile=True)]
        out.append(self.batch(settings, f"warm-up {b}", b))
        for size in sorted(set(settings.capture_sizes)):
            out.append(self.batch(settings, f"capture {size}", size))
        out.append(self.batch(settings, f"sampler warm-up {min(n, b)}", min(n, b)))
        return out

    def encoder_length(self, settings: Settings) -> int | None:
        """``max_encoder_len`` as the release computes it (None: the release has no encoder-decoder state)."""
        enc = self.source.encoder_length
        if enc is None:
            return None
        hf = SimpleNamespace()
        if settings.max_source_positions is not None:
            hf.max_source_positions = settings.max_source_positions
        me = StandIn("EncoderDecoderModelState", model_config=StandIn("model_config", hf_config=hf),
                     max_model_len=settings.max_model_len)  # fmt: skip
        return int(eval(enc.code, {"getattr": getattr}, {"self": me}))


def settings_of(config: Any, capture_sizes: tuple[int, ...]) -> Settings:
    """The start-up settings of a harness ``RunnerConfig`` and the capture sizes drawn beside it."""
    return Settings(
        max_model_len=config.max_model_len,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_num_seqs=config.max_num_reqs,
        capture_sizes=tuple(capture_sizes),
        max_source_positions=config.max_source_positions,
        num_kv_cache_groups=len(config.groups),
    )


def rows_of(config: Any, widths: tuple[int, ...] | list[int]) -> list[Any]:
    """Each group's row as the kernel reads it: the release's widths (entries), kernel blocks, DCP.

    A cross-attention row is read by encoder position, not divided among DCP ranks (docs/spec.md, "How the
    tables are used"), so its column holds ``kbs`` tokens whatever ``C``.
    """
    from crossattn_sizing.core.startup_checks import Row

    rows = []
    for g, w in zip(config.groups, widths, strict=True):
        kind = g.kind.value
        sharded = kind not in ("cross", "mamba") and g.dcp_sharded
        rows.append(Row(kind, int(w), g.kbs, config.dcp_size if sharded else 1))
    return rows


@dataclass(frozen=True)
class StartupVerdict:
    """A release's start-up batches for one config, judged: what ran, what broke, where."""

    version: str
    batches: tuple[DummyBatch, ...]
    encoder_len: int | None
    encoder_where: str
    breaches: tuple[Any, ...]
    """:class:`~crossattn_sizing.core.startup_checks.Breach` of every judge, batch by batch."""

    @property
    def holds(self) -> bool:
        """No judge found a breach."""
        return not self.breaches


def judge(run: StartupRun, config: Any, capture_sizes: tuple[int, ...], widths: Any) -> StartupVerdict:
    """Run the release's start-up batches for ``config`` and judge them against its rows (``widths``:
    the release's own sizing of ``config``, entries per row and group)."""
    from crossattn_sizing.core import startup_checks as checks

    settings = settings_of(config, capture_sizes)
    rows = rows_of(config, widths)
    enc = run.encoder_length(settings) if config.is_encoder_decoder else None
    batches = run.batches(settings)
    breaches: list[Any] = []
    for b in batches:
        if not b.attention:
            continue
        breaches += checks.length_breaches(b.purpose, b.seq_lens, rows, enc)
        breaches += checks.column_breaches(b.purpose, b.seq_lens, rows, enc)
        breaches += checks.slot_breaches(b.purpose, b.scheduled, b.slots)
    e = run.source.encoder_length
    where = f"{e.path}:{e.line}" if e is not None else ""
    return StartupVerdict(run.source.version, tuple(batches), enc, where, tuple(breaches))


def verdict_dict(verdict: StartupVerdict) -> dict[str, Any]:
    """The verdict as the worker sends it: what ran, each breach's line, where the lengths were set."""
    return {
        "version": verdict.version,
        "holds": verdict.holds,
        "batches": [
            {"purpose": b.purpose, "seq_lens": list(b.seq_lens), "attention": b.attention}
            for b in verdict.batches
        ],
        "where": verdict.batches[0].where if verdict.batches else "",
        "encoder_len": verdict.encoder_len,
        "encoder_where": verdict.encoder_where,
        "breaches": [b.line() for b in verdict.breaches],
    }


def read_tree(root: Any, version: str) -> StartupRun:
    """The start-up methods of the release whose ``vllm/`` lies under ``root`` (a ``Path``), bound."""
    texts = {}
    for rel in FILES:
        path = root / rel
        if path.is_file():
            texts[rel] = path.read_text()
    source = StartupSource.from_texts(version, texts, str(root))
    line = seq_lens_line(texts[BATCH_FILE])
    return StartupRun(source, line)
