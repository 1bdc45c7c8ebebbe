"""Hostile and careless user code for the isolation tests (tests/test_isolation.py).

Each policy or implementation does one thing a judge in the same process could
not survive or would be fooled by: it leaves the process, crashes, hangs,
keeps a thread alive, replaces signal handlers, rebinds the harness's own
capacity check, changes its inputs, or answers in the wrong form.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Sequence

import torch

from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.policies import BUILTIN_POLICIES
from crossattn_sizing.impl import TorchImpl
from crossattn_sizing.impl.attention import lse_merge, torch_write_kv
from crossattn_sizing.impl.step import AttentionStep, SlotStep, WriteStep

if os.environ.get("HOSTILE_CODE_REBINDS"):  # only where a test asks: rebinding at import fools a shared judge
    import crossattn_sizing.core.capacity as _capacity

    _capacity.violations = lambda *args, **kwargs: []


# Policies ---------------------------------------------------------------------------------------
def width_one(config: RunnerConfig) -> tuple[int, ...]:
    """Width 1 for every group: fails every capacity property, unless the judge's check was rebound."""
    return (1,) * len(config.groups)


def answers_dict(config: RunnerConfig) -> dict[int, str]:
    """A mapping, which read as a sequence gives its keys as widths."""
    return {1000000 + i: "x" for i in range(len(config.groups))}


def answers_generator(config: RunnerConfig):  # type: ignore[no-untyped-def]
    return (w for w in BUILTIN_POLICIES["mrv2"](config))


def starts_thread(config: RunnerConfig) -> tuple[int, ...]:
    """The right widths, and a non-daemon thread that never ends."""
    threading.Thread(target=threading.Event().wait, daemon=False).start()
    return BUILTIN_POLICIES["mrv2"](config)


def exits(config: RunnerConfig) -> tuple[int, ...]:
    os._exit(0)


def sleeps(config: RunnerConfig) -> tuple[int, ...]:
    time.sleep(3600)
    return (0,) * len(config.groups)


def setsid_grandchild(path: str) -> None:
    """Start a grandchild in a session of its own (a double fork: the child calls ``setsid()``, forks,
    and exits), which sleeps; its pid is written to ``path`` before this returns."""
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            with open(path + ".part", "w") as out:
                out.write(str(os.getpid()))
            os.rename(path + ".part", path)
            time.sleep(3600)
        os._exit(0)
    os.waitpid(child, 0)
    while not os.path.exists(path):
        time.sleep(0.01)


def leaves_a_setsid_grandchild(config: RunnerConfig) -> tuple[int, ...]:
    """The right widths; on its first call it starts a :func:`setsid_grandchild`. Its pid goes where
    ``HOSTILE_PID_FILE`` says, so a test can check that the grandchild did not outlive the run."""
    path = os.environ.get("HOSTILE_PID_FILE")
    if path and not os.path.exists(path):
        setsid_grandchild(path)
    return BUILTIN_POLICIES["mrv2"](config)


class LyingBatch:
    """Single calls give the pre-fix sizing (which fails); the batch method the fixed one (which holds)."""

    def __call__(self, config: RunnerConfig) -> tuple[int, ...]:
        return BUILTIN_POLICIES["mrv2-prefix"](config)

    def widths_many(self, configs: Sequence[RunnerConfig]) -> list[tuple[int, ...]]:
        return [BUILTIN_POLICIES["mrv2"](c) for c in configs]


class HonestBatch(LyingBatch):
    """The batch method agrees with single calls (the cross-check must stay quiet)."""

    def widths_many(self, configs: Sequence[RunnerConfig]) -> list[tuple[int, ...]]:
        return [self(c) for c in configs]


lying_batch = LyingBatch()
honest_batch = HonestBatch()


# Implementations ----------------------------------------------------------------------------------
class LeavesSetsidGrandchild(TorchImpl):
    """Right kernels; when created (in each DCP rank) it starts a :func:`setsid_grandchild`, its pid in
    a file named for the creating process in the folder ``HOSTILE_PID_DIR`` names."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        super().__init__(device)
        folder = os.environ.get("HOSTILE_PID_DIR")
        if folder:
            setsid_grandchild(os.path.join(folder, str(os.getpid())))


class ExitsInSlotMapping(TorchImpl):
    def slot_mapping(self, *, step: SlotStep, out: torch.Tensor) -> None:
        os._exit(0)


class SegfaultsInAttention(TorchImpl):
    def paged_attention(
        self, *, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        os.kill(os.getpid(), signal.SIGSEGV)
        raise AssertionError("unreachable")


class ClearsSlots(TorchImpl):
    """Writes right, then clears the slots it was handed."""

    def write_kv(self, *, step: WriteStep, **tensors: torch.Tensor) -> None:  # key, value and both caches
        torch_write_kv(step=step, **tensors)
        step.slots.fill_(-1)


class OverwritesOuts(TorchImpl):
    """Merges right, then zeroes the first partial it was handed."""

    def merge(self, *, outs: Sequence[torch.Tensor], lses: Sequence[torch.Tensor]) -> torch.Tensor:
        merged = lse_merge(outs=outs, lses=lses)
        outs[0].zero_()
        return merged


class SleepsInAttention(TorchImpl):
    def paged_attention(
        self, *, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(3600)
        return super().paged_attention(query=query, key_cache=key_cache, value_cache=value_cache, step=step)


class WrongShape(TorchImpl):
    """Attention output one query short."""

    def paged_attention(
        self, *, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out, lse = super().paged_attention(
            query=query, key_cache=key_cache, value_cache=value_cache, step=step
        )
        return out[1:], lse


class ReturnsList(TorchImpl):
    """Attention output as nested Python lists."""

    def paged_attention(
        self, *, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ):  # type: ignore[no-untyped-def]
        out, lse = super().paged_attention(
            query=query, key_cache=key_cache, value_cache=value_cache, step=step
        )
        return [out.tolist(), lse.tolist()]


class IgnoresSigterm(TorchImpl):
    """Installs handlers that swallow SIGTERM and SIGINT when it is created."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        super().__init__(device)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class CountsStartsThenExits(TorchImpl):
    """Records each start of its worker (a line in ``HOSTILE_STARTS_FILE``), then ``os._exit(3)`` in
    every slot mapping: how many workers a crashing implementation costs a run is countable."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        super().__init__(device)
        path = os.environ.get("HOSTILE_STARTS_FILE")
        if path:
            with open(path, "a") as out:
                out.write(f"{os.getpid()}\n")

    def slot_mapping(self, *, step: SlotStep, out: torch.Tensor) -> None:
        os._exit(3)


class ReturnsMeta(TorchImpl):
    """Right attention, handed back on the ``meta`` device (which holds no values)."""

    def paged_attention(
        self, *, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out, lse = super().paged_attention(
            query=query, key_cache=key_cache, value_cache=value_cache, step=step
        )
        return out.to("meta"), lse.to("meta")


class ReturnsGraph(TorchImpl):
    """Right attention values, still requiring grad (a graph, not a result)."""

    def paged_attention(
        self, *, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out, lse = super().paged_attention(
            query=query, key_cache=key_cache, value_cache=value_cache, step=step
        )
        return out.clone().requires_grad_(True), lse


class ReturnsHalf(TorchImpl):
    """Attention in fp16, not the fp32 the interface asks for."""

    def paged_attention(
        self, *, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out, lse = super().paged_attention(
            query=query, key_cache=key_cache, value_cache=value_cache, step=step
        )
        return out.half(), lse


class ReturnsInfinity(TorchImpl):
    """Attention whose output is +inf everywhere (no right answer holds an infinite output)."""

    def paged_attention(
        self, *, query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, step: AttentionStep
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out, lse = super().paged_attention(
            query=query, key_cache=key_cache, value_cache=value_cache, step=step
        )
        return torch.full_like(out, float("inf")), lse


class Honest(TorchImpl):
    """A user's subclass of the torch implementation that changes nothing (every check must stay quiet)."""


def negative_at_m8(config: RunnerConfig) -> tuple[int, ...]:
    """The fixed sizing, except a negative width where ``M = 8``: one bad value in a packed batch."""
    return (-3,) if config.max_model_len == 8 else BUILTIN_POLICIES["mrv2"](config)


def fixed_sizing(config: RunnerConfig) -> tuple[int, ...]:
    """A user's own copy of the fixed sizing (mrv2): honest code, for the isolation benchmark."""
    return BUILTIN_POLICIES["mrv2"](config)
