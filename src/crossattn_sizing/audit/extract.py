"""Turn a release's model runner into a sizing policy the harness can check.

A runner is found by its method, not by a fixed class: the file where each
release keeps it is tried first, then the runner's folder is searched for a
class defining ``initialize_kv_cache``. The resulting
:class:`ExtractedPolicy` is a ``(RunnerConfig) -> tuple[int, ...]`` callable
like the built-ins of :mod:`crossattn_sizing.core.policies`: per config it
evaluates the runner's ``__init__`` (for the attributes it sets, entering no
calls), then ``initialize_kv_cache`` and the block-table classes it builds,
and returns the row widths of the tables allocated, one per KV-cache group,
in stored entries.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from crossattn_sizing.audit.interp import Allocation, Interpreter, RaiseSignal, ReadError
from crossattn_sizing.audit.modules import ModuleIndex
from crossattn_sizing.audit.values import ClassRef, FuncRef, Instance, Sym, Unknown
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.releases.sources import SourceTree

METHOD = "initialize_kv_cache"


class RunnerAbsent(ReadError):
    """The release has no such runner at all (e.g. ModelRunner V1 from 0.34.0): nothing to read."""


@dataclass(frozen=True)
class RunnerSpec:
    """Where a runner lives: the usual file, and the folder to search when it moved."""

    key: str
    title: str
    path: str
    search_under: str
    recursive: bool
    class_name: str


RUNNERS: dict[str, RunnerSpec] = {
    "v2": RunnerSpec(
        "v2", "ModelRunner V2", "vllm/v1/worker/gpu/model_runner.py", "vllm/v1/worker/gpu/", True,
        "GPUModelRunner",
    ),
    "v1": RunnerSpec(
        "v1", "ModelRunner V1", "vllm/v1/worker/gpu_model_runner.py", "vllm/v1/worker/", False,
        "GPUModelRunner",
    ),
    # 0.34.0 keeps a second copy of V2's sizing rule (its own initialize_kv_cache, not inherited).
    "cpu": RunnerSpec(
        "cpu", "StandaloneCPUModelRunner", "vllm/v1/worker/cpu/standalone_model_runner.py",
        "vllm/v1/worker/cpu/", False, "StandaloneCPUModelRunner",
    ),
}  # fmt: skip


def locate(index: ModuleIndex, spec: RunnerSpec) -> tuple[ClassRef, FuncRef]:
    """The runner class and its ``initialize_kv_cache``, or a ReadError naming what is missing.

    A class found by searching counts only when its ``initialize_kv_cache``
    is defined in the runner's own folder: a subclass of another runner (an
    encoder-only variant of V2 kept next to where V1 used to be) is not V1.
    A runner file that is there but is not valid Python says so.
    """
    if index.module_for_path(spec.path) is None and spec.path in index.syntax_errors:
        raise ReadError(f"{spec.path} is not valid Python ({index.syntax_errors[spec.path]}): cannot be read")
    if index.module_for_path(spec.path) is not None:
        found = _pick(index.classes_defining(spec.path, METHOD), spec, index)
        if found is not None:
            return found
    candidates: list[ClassRef] = []
    foreign: list[str] = []
    for path in index.tree.files(spec.search_under):
        if path == spec.path or not _in_scope(path, spec):
            continue
        for cls in index.classes_defining(path, METHOD):
            origin = _defining_path(index, cls)
            if _in_scope(origin, spec):
                candidates.append(cls)
            else:
                foreign.append(f"{cls.name} inherits it from {origin}")
    found = _pick(candidates, spec, index)
    if found is not None:
        return found
    if index.module_for_path(spec.path) is not None:
        raise ReadError(f"method {METHOD} not found in {spec.path}")
    if not any(True for _ in index.tree.files(spec.search_under)):
        raise RunnerAbsent(f"{spec.search_under} not found: no {spec.title} in this release")
    if foreign:
        raise RunnerAbsent(
            f"{spec.path} not found: no {spec.title} in this release (the only classes under "
            f"{spec.search_under} with {METHOD} belong to another runner: {'; '.join(sorted(foreign))})"
        )
    raise RunnerAbsent(f"{spec.path} not found, and no class under {spec.search_under} defines {METHOD}")


def _in_scope(path: str, spec: RunnerSpec) -> bool:
    if not path.startswith(spec.search_under):
        return False
    return spec.recursive or "/" not in path[len(spec.search_under) :]


def _defining_path(index: ModuleIndex, cls: ClassRef) -> str:
    method = index.find_method(cls, METHOD)
    assert method is not None  # classes_defining only lists classes that have it
    return index.module_of(method).path


def _pick(classes: list[ClassRef], spec: RunnerSpec, index: ModuleIndex) -> tuple[ClassRef, FuncRef] | None:
    # Prefer the GPU runner by name; CPU/XPU runners subclass it and inherit the method.
    ranked = sorted(
        classes,
        key=lambda c: (c.name != spec.class_name, not c.name.endswith("ModelRunner"), c.module),
    )
    for cls in ranked:
        if cls.name == spec.class_name or cls.name.endswith("ModelRunner") or len(ranked) == 1:
            return cls, _method(cls, index)
    return None


def _method(cls: ClassRef, index: ModuleIndex) -> FuncRef:
    method = index.find_method(cls, METHOD)
    if method is None:
        raise ReadError(f"{cls.name}.{METHOD} is inherited from outside the tree")
    return method


@dataclass(frozen=True)
class Extraction:
    """What one run of a runner's sizing over one config gives: a value, so nothing depends on call order.

    ``conditions`` are the undecided conditions under which its tables were
    built; ``kernel_block_mentions`` where the classes that allocated them name
    a kernel block size (used to tell which ids a row stores: a width that
    ignores the kernel block size describes manager-block rows only if the
    table class never handles kernel blocks, so it cannot expand ids on append).
    """

    widths: tuple[int, ...]
    conditions: tuple[str, ...] = ()
    kernel_block_mentions: tuple[str, ...] = ()


class ExtractedPolicy:
    """The sizing a release's runner computes, as a harness sizing policy.

    Calling it gives the widths and raises :class:`ReadError` when a width
    depends on something the audit does not know; :meth:`read` gives the
    widths with what else the run found (:class:`Extraction`).
    """

    def __init__(self, index: ModuleIndex, spec: RunnerSpec, label: str) -> None:
        self.index = index
        self.spec = spec
        self.cls, self.method = locate(index, spec)
        self.name = f"vllm {label} {spec.title}"
        module = index.module_of(self.method)
        self.where = f"{module.path}:{self.method.node.lineno} {self.cls.name}.{METHOD}"

    def __call__(self, config: RunnerConfig) -> tuple[int, ...]:
        """The widths the release's source gives ``config``: the policy that :meth:`read` explains."""
        return self.read(config).widths

    def read(self, config: RunnerConfig) -> Extraction:
        """Interpret the runner's sizing method over ``config``."""
        interp = Interpreter(self.index, config)
        runner = Instance(self.cls, config_fallback=True)
        init = self.index.find_method(self.cls, "__init__")
        if init is not None:
            params = [a.arg for a in init.node.args.posonlyargs + init.node.args.args][1:]
            interp.run_init(runner, [Sym(p) for p in params], {})
        try:
            interp.call(self.method, [Sym("kv_cache_config")], {}, runner)
        except RaiseSignal as exc:
            raise ReadError(f"the source raises at {exc.where} for {config.describe()}") from None
        widths, conditions = _widths(interp.allocations, config, self.where, interp.skipped)
        owners = (a.owner for a in interp.allocations if a.owner is not None)
        return Extraction(widths, conditions, self._kernel_block_mentions(tuple(dict.fromkeys(owners))))

    def _kernel_block_mentions(self, table_classes: tuple[ClassRef, ...]) -> tuple[str, ...]:
        """Where ``table_classes`` name a kernel block size."""
        found = []
        for cls in table_classes:
            module = self.index.module_of(cls)
            for node in ast.walk(cls.node):
                name = _identifier(node)
                if name is not None and "kernel_block" in name:
                    found.append(f"{module.path}:{node.lineno} {cls.name} ({name})")  # type: ignore[attr-defined]
        return tuple(found)


def _identifier(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.arg):
        return node.arg
    if isinstance(node, ast.keyword):
        return node.arg
    return None


def _widths(
    allocations: list[Allocation], config: RunnerConfig, where: str, skipped: list[str]
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    if not allocations:
        why = f": {'; '.join(dict.fromkeys(skipped))}" if skipped else ""
        raise ReadError(f"no block-table allocation reached from {where}{why}")
    groups = len(config.groups)
    if len(allocations) % groups:
        sites = ", ".join(sorted({a.where for a in allocations}))
        raise ReadError(f"{len(allocations)} block-table allocations for {groups} KV-cache groups ({sites})")
    for alloc in allocations:
        if isinstance(alloc.width, Unknown):
            raise ReadError(f"row width at {alloc.where} could not be read: {alloc.width.reason}")
        if isinstance(alloc.width, bool) or not isinstance(alloc.width, int):
            raise ReadError(f"row width at {alloc.where} is {alloc.width!r}, not an integer")
    chunks = [allocations[i : i + groups] for i in range(0, len(allocations), groups)]
    widths = tuple(a.width for a in chunks[0])
    for chunk in chunks[1:]:
        if tuple(a.width for a in chunk) != widths:
            raise ReadError(
                f"tables are built with different widths on different paths "
                f"({chunks[0][0].where} vs {chunk[0].where})"
            )
    conditions = tuple(dict.fromkeys(c for a in allocations for c in a.conditions))
    return widths, conditions


def read_runner(tree: SourceTree | ModuleIndex, runner: str, label: str | None = None) -> ExtractedPolicy:
    """The extracted policy of ``runner`` (``v1``/``v2``) in ``tree``; ReadError if not locatable."""
    index = tree if isinstance(tree, ModuleIndex) else ModuleIndex(tree)
    return ExtractedPolicy(index, RUNNERS[runner], label or index.tree.label)


__all__ = [
    "RUNNERS", "ExtractedPolicy", "Extraction", "ReadError", "RunnerAbsent", "RunnerSpec", "locate",
    "read_runner",
]
