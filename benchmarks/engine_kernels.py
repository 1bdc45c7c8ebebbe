"""Each release's own kernels as ``--impl vllm==X``: where they are, whether they run, error and time.

``python benchmarks/engine_kernels.py 0.25.0 0.34.0`` (the releases are
installed as the adapter installs them) runs every step of the release's
implementation on fixed inputs, per dtype, against a float64 computation from
the same dtype-rounded inputs, and writes reports/engine_kernels.md: per
release a table of each kernel's dotted name, whether it ran, its maximum
absolute error per dtype and its median wall time per call (in the worker,
interpreted on CPU, protocol included). bf16 is not run on CPU (Triton's
interpreter computes bf16 on raw bits): the table says so. Figures, not a
timed test.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from crossattn_sizing.base.errors import ReleaseUnavailable
from crossattn_sizing.core.slot_layout import SlotLayout
from crossattn_sizing.engine.client import Inexpressible, close_all
from crossattn_sizing.engine.vllm.adapters import CPU_BF16, VllmImpl
from crossattn_sizing.impl.slot_mapping import global_positions
from crossattn_sizing.impl.step import AttentionStep, SlotStep, WriteStep

REPORT = Path(__file__).resolve().parent.parent / "reports" / "engine_kernels.md"
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
HEADS, DIM, KBS, BLOCKS = 2, 64, 16, 16
ROUNDS = 3


def timed(call: Callable[[], object]) -> tuple[object, float]:
    """The call's result and its median wall time over :data:`ROUNDS` calls, in seconds."""
    times, result = [], None
    for _ in range(ROUNDS):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
    return result, statistics.median(times)


def slot_case(impl: VllmImpl) -> tuple[str, float]:
    """Two requests over a 4-entry table, DCP 2 rank 1 interleave 4 (else, where the interpreter refuses
    that, DCP 1): mismatches against the rule."""
    try:
        wrong, total, wall = slot_run(impl, 2)
        return f"{wrong} of {total} wrong (DCP 2, rank 1, interleave 4)", wall
    except Inexpressible:
        wrong, total, wall = slot_run(impl, 1)
        return f"{wrong} of {total} wrong (DCP 1; DCP 2 not run on CPU: interpreter)", wall


def slot_run(impl: VllmImpl, size: int) -> tuple[int, int, float]:
    table = torch.tensor([3, 1, 4, 0, 5, 9, 2, 6], dtype=torch.int32)
    positions = torch.cat([torch.arange(0, 50 * size), torch.arange(10 * size, 45 * size)])
    rank = size - 1
    layout = SlotLayout(KBS, size, 4, rank)
    lens = (50 * size, 35 * size)
    step = SlotStep(table, 4, torch.tensor([0, 1], dtype=torch.int32),
                    torch.tensor([0, lens[0], sum(lens)], dtype=torch.int32), positions, layout)  # fmt: skip
    out = torch.empty(sum(lens) + 10, dtype=torch.int64)
    _, wall = timed(lambda: impl.slot_mapping(step=step, out=out))
    want = []
    for b, ps in ((0, positions[: lens[0]]), (1, positions[lens[0] :])):
        for p in ps.tolist():
            col, off = divmod(p, KBS * size)
            owned = (off // 4) % size == rank
            local = (off // (4 * size)) * 4 + off % 4
            want.append(int(table[b * 4 + col]) * KBS + local if owned else -1)
    want += [-1] * 10
    return sum(int(a != b) for a, b in zip(out.tolist(), want, strict=True)), len(want), wall


def write_case(impl: VllmImpl, dtype: torch.dtype) -> tuple[float, float]:
    gen = torch.Generator().manual_seed(0)
    key, value = (torch.randn(64, HEADS, DIM, generator=gen).to(dtype) for _ in range(2))
    slots = torch.randperm(BLOCKS * KBS, generator=gen)[:64].to(torch.int64)
    slots[::7] = -1

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        caches = [torch.full((BLOCKS, KBS, HEADS, DIM), float("nan"), dtype=dtype) for _ in range(2)]
        impl.write_kv(key=key, value=value, key_cache=caches[0], value_cache=caches[1], step=WriteStep(slots))
        return caches[0], caches[1]

    (kc, vc), wall = timed(run)  # type: ignore[misc]
    live = slots >= 0
    got_k = kc.view(-1, HEADS, DIM)[slots[live]]
    got_v = vc.view(-1, HEADS, DIM)[slots[live]]
    err = max(float((got_k.double() - key[live].double()).abs().max()),
              float((got_v.double() - value[live].double()).abs().max()))  # fmt: skip
    untouched = torch.ones(BLOCKS * KBS, dtype=torch.bool)
    untouched[slots[live]] = False
    if not bool(kc.view(-1, HEADS, DIM)[untouched].isnan().all()):
        err = math.inf  # a cell no token owns was written
    return err, wall


def dense(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float) -> tuple[torch.Tensor,
                                                                                                torch.Tensor]:
    """float64 softmax attention of one query ``[H, D]`` over keys/values ``[N, H, D]``: out, lse."""
    scores = torch.einsum("hd,nhd->hn", query.double(), keys.double()) * scale
    lse = torch.logsumexp(scores, dim=1)
    return torch.einsum("hn,nhd->hd", torch.softmax(scores, dim=1), values.double()), lse


def attention_case(impl: VllmImpl, dtype: torch.dtype, causal: bool) -> tuple[float, float]:
    """Two requests (80 and 90 local keys) on DCP rank 1 of 2, interleave 4: max |out - float64|."""
    gen = torch.Generator().manual_seed(1)
    kc, vc = (torch.randn(BLOCKS, KBS, HEADS, DIM, generator=gen).to(dtype) for _ in range(2))
    table = torch.tensor([3, 1, 4, 0, 11, 0, 5, 9, 2, 6, 12, 13], dtype=torch.int32)
    layout = SlotLayout(KBS, 2, 4, 1)
    lens = [80, 90]
    qpos = torch.tensor([0, 40, 179, 100, 250, 299])
    query = torch.randn(6, HEADS, DIM, generator=gen).to(dtype)
    step = AttentionStep(table, 6, torch.tensor([0, 3, 6], dtype=torch.int32),
                         torch.tensor(lens, dtype=torch.int32), qpos, layout, causal, DIM**-0.5)  # fmt: skip
    result, wall = timed(lambda: impl.paged_attention(query=query, key_cache=kc, value_cache=vc, step=step))
    out, lse = result  # type: ignore[misc]
    err = 0.0
    for q in range(6):
        b = 0 if q < 3 else 1
        j = torch.arange(lens[b])
        if causal:
            j = j[global_positions(lens[b], layout, "cpu") <= qpos[q]]
        slots = table[b * 6 + j // KBS].long() * KBS + j % KBS
        keys, values = kc.view(-1, HEADS, DIM)[slots], vc.view(-1, HEADS, DIM)[slots]
        want, want_lse = dense(query[q], keys, values, DIM**-0.5)
        err = max(err, float((out[q].double() - want).abs().max()),
                  float((lse[q].double() - want_lse).abs().max()))  # fmt: skip
    return err, wall


def merge_case(impl: VllmImpl, ranks: int) -> tuple[float, float, str]:
    """The ranks' partials combined; ``(max error, time, the function that ran)``."""
    gen = torch.Generator().manual_seed(2)
    outs = [torch.randn(32, HEADS, DIM, generator=gen) for _ in range(ranks)]
    lses = [torch.randn(32, HEADS, generator=gen) * 4 for _ in range(ranks)]
    lses[1][:8] = float("-inf")
    before = impl.calls.copy()
    merged, wall = timed(lambda: impl.merge(outs=outs, lses=lses))
    ran = next(name for name in impl.calls - before if name.startswith("vllm."))
    stacked = torch.stack([s.double() for s in lses])
    weights = torch.softmax(stacked, dim=0)
    want = sum(w[..., None] * o.double() for w, o in zip(weights, outs, strict=True))
    return float((merged.double() - want).abs().max()), wall, ran  # type: ignore[union-attr]


def fmt(err: float) -> str:
    return "exact" if err == 0 else f"{err:.1e}"


def release_table(version: str) -> list[str]:
    try:
        impl = VllmImpl(f"vllm=={version}")
    except ReleaseUnavailable as exc:
        return [f"## vLLM {version}", "", f"could not run: {exc}", ""]
    lines = [f"## vLLM {version}", "", "| step | function | runs | fp32 max error | fp16 max error | bf16 | "
             "time per call (fp32) |", "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    mismatches, wall = slot_case(impl)
    lines.append(f"| slot_mapping | `{impl.provenance['slot_mapping']}` | yes | {mismatches} | - | - | "
                 f"{wall * 1e3:.0f} ms |")  # fmt: skip
    steps: list[tuple[str, Callable[[torch.dtype], tuple[float, float]]]] = [
        ("write_kv", lambda d: write_case(impl, d)),
        ("paged_attention (cross)", lambda d: attention_case(impl, d, False)),
        ("paged_attention (self)", lambda d: attention_case(impl, d, True)),
    ]
    for name, case in steps:
        errs, walls = {}, {}
        before = impl.calls.copy()
        for dtype in DTYPES[:2]:
            errs[dtype], walls[dtype] = case(dtype)
        # What ran, by dotted name (the attention cases are DCP 2: the decode kernel, not the C = 1 backend).
        ran = [k for k in impl.calls - before if k.startswith("vllm.")]
        fn = ran[0] if len(ran) == 1 else impl.provenance[name.split(" ")[0]]
        lines.append(f"| {name} | `{fn}` | yes | {fmt(errs[torch.float32])} | {fmt(errs[torch.float16])} | "
                     f"not run on CPU | {walls[torch.float32] * 1e3:.0f} ms |")  # fmt: skip
    for ranks in (4, 3):  # the DCP correction takes powers of two; the two-way merge folds the rest
        err, wall, ran = merge_case(impl, ranks)
        lines.append(f"| merge ({ranks} ranks) | `{ran}` | yes | {fmt(err)} | - (fp32 partials) "
                     f"| - | {wall * 1e3:.0f} ms |")  # fmt: skip
    close_all()
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("versions", nargs="*", default=["0.25.0", "0.34.0"])
    args = parser.parse_args(argv)
    body = [line for v in args.versions for line in release_table(v)]
    text = [
        "# The releases' own kernels under `--impl vllm==X`",
        "",
        f"`python benchmarks/engine_kernels.py {' '.join(args.versions)}`; CPU, Triton "
        f"{__import__('triton').__version__}'s interpreter, torch {torch.__version__}; in each release's "
        "worker process (times include the JSON-lines round trip). Errors: maximum absolute difference "
        "from a float64 computation on the same dtype-rounded inputs (attention: output and LSE; write: "
        "stored values, and every cell no token owns still NaN). Shapes: "
        f"{HEADS} heads of {DIM}, kernel blocks of {KBS}; attention on DCP rank 1 of 2 (interleave 4), "
        f"two requests of 80 and 90 local keys, 6 queries; median of {ROUNDS} calls.",
        "",
        "merge: the release's DCP combination (`cp_lse_ag_out_ar`: `correct_attn_out` against every "
        "rank's LSE, all-gathered, then summed as the all-reduce sums; one process stands in for the "
        "group) where head size and DCP size are powers of two, which its kernel's `tl.arange` needs; "
        "the release's two-way `merge_attn_states` folds other sizes.",
        "",
        f"bf16: {CPU_BF16}.",
        "",
        *body,
    ]
    REPORT.write_text("\n".join(text))
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
