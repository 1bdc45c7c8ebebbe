"""Slot-mapping and paged-attention throughput of each implementation, against the reference.

Why a script and not a timed test: throughput depends on the machine and its
load, so it is measured and printed, never asserted. It answers "how much
slower is the harness's kernel than what the engine would run", and on CUDA
compares paged attention with torch's dense ``scaled_dot_product_attention``
over the same keys laid out contiguously (the ceiling a paged read aims for).

Run:

    .venv/bin/python benchmarks/bench_impl.py                      # cpu, small sizes
    .venv/bin/python benchmarks/bench_impl.py --device cuda        # full Nemotron-Parse page sizes
    .venv/bin/python benchmarks/bench_impl.py --impls torch --requests 8 --encoder-len 1024

The workload is a decode step of cross-attention: ``--requests`` requests,
each with ``--encoder-len`` encoder tokens already written through the block
table, one query per request. Columns:

- tokens/s: encoder tokens mapped (slot mapping) or attended over (attention)
  per second, all requests and heads together;
- GB/s: bytes the kernel must move at least: per token, the position, the
  table entry and the slot (slot mapping: 8 + 4 + 8 bytes); the key and value
  of every head (attention). Cache-line waste is not counted.

The reference (pure Python, single head) runs on ``--reference-tokens`` tokens
of one request and is reported per token, so its rate compares directly.
On CPU the Triton kernels run in Triton's interpreter, which measures the
interpreter, not the kernel: it is shown to size CI runs, not as a speed.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the reference oracle and properties/ live at the repository root

from crossattn_sizing.base.intmath import cdiv  # noqa: E402
from crossattn_sizing.core.config import GroupKind, KVCacheGroup  # noqa: E402
from crossattn_sizing.core.policies import BUILTIN_POLICIES  # noqa: E402
from crossattn_sizing.core.slot_layout import SlotLayout  # noqa: E402
from crossattn_sizing.impl import Impl  # noqa: E402
from crossattn_sizing.impl.runner import PagedRunner, slot_step  # noqa: E402
from crossattn_sizing.impl.step import AttentionStep  # noqa: E402
from crossattn_sizing.specs.resolve import load_impl  # noqa: E402
from properties.config_strategies import encoder_decoder_config  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def timed(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median seconds of ``fn`` after two warm-up calls (compilation, caches)."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def build(impl: Impl, args: argparse.Namespace) -> tuple[PagedRunner, list[int], torch.Tensor]:
    """A runner with every request's encoder K/V written, and one decode query per request."""
    e, n = args.encoder_len, args.requests
    config = encoder_decoder_config((KVCacheGroup(GroupKind.CROSS, args.block_size, args.kbs),), e, e,
                                    max_num_reqs=n)
    widths = BUILTIN_POLICIES["mrv2"](config)
    blocks = cdiv(e, args.block_size)
    dtype = DTYPES[args.dtype]
    runner = PagedRunner(
        config, widths, impl, num_blocks=n * blocks + 1, num_heads=args.heads, head_dim=args.head_dim,
        dtype=dtype, guarded=True,
    )
    ids = torch.randperm(n * blocks, generator=torch.Generator().manual_seed(0)) + 1
    rows = list(range(n))
    for r in rows:
        runner.append(0, r, ids[r * blocks : (r + 1) * blocks].tolist())
    gen = torch.Generator().manual_seed(1)
    kv = [torch.randn(e, args.heads, args.head_dim, generator=gen) for _ in rows]
    runner.write(0, rows, [range(e)] * n, kv, kv)
    query = torch.randn(n, args.heads, args.head_dim, generator=gen).to(impl.device, dtype)
    return runner, rows, query


def bench_impl(impl: Impl, args: argparse.Namespace) -> list[tuple[str, str, float, float]]:
    runner, rows, query = build(impl, args)
    e, n, dev = args.encoder_len, args.requests, impl.device
    table = runner.tables[0]
    layout = SlotLayout(args.kbs)
    mapping = slot_step(table, rows, [range(e)] * n, layout)
    out = torch.empty(n * e, dtype=torch.int64, device=dev)

    def slots() -> None:
        impl.slot_mapping(step=mapping, out=out)

    t_slots = timed(slots, dev, args.repeats)
    table.gather(rows, into=runner.inputs[0])
    inputs = runner.inputs[0]
    key_cache, value_cache = runner.caches[(0, 0)]
    q_qsl = torch.arange(n + 1, dtype=torch.int32, device=dev)
    seq_lens = torch.full((n,), e, dtype=torch.int32, device=dev)
    q_pos = torch.zeros(n, dtype=torch.int64, device=dev)

    step = AttentionStep(inputs.storage, inputs.width, q_qsl, seq_lens, q_pos, layout, False, runner.scale)

    def attend() -> None:
        impl.paged_attention(query=query, key_cache=key_cache, value_cache=value_cache, step=step)

    t_attn = timed(attend, dev, args.repeats)
    tokens = n * e
    item = key_cache.element_size()
    kv_bytes = tokens * args.heads * args.head_dim * item * 2
    rows_out = [
        (impl.name, "slot mapping", tokens / t_slots, tokens * 20 / t_slots / 1e9),
        (impl.name, "paged attention", tokens * args.heads / t_attn, kv_bytes / t_attn / 1e9),
    ]
    if dev.type == "cuda":
        # Dense SDPA over the same keys, gathered once into [n, H, e, D] outside the timing.
        dense = key_cache.view(-1, args.heads, args.head_dim)
        slots_all = out.view(n, e)
        k = dense[slots_all].permute(0, 2, 1, 3).contiguous()
        q = query[:, :, None, :]

        def sdpa() -> None:
            torch.nn.functional.scaled_dot_product_attention(q, k, k)

        t_dense = timed(sdpa, dev, args.repeats)
        rows_out.append(("torch sdpa (dense)", "attention", tokens * args.heads / t_dense,
                         kv_bytes / t_dense / 1e9))
    return rows_out


def bench_reference(args: argparse.Namespace) -> list[tuple[str, str, float, float]]:
    from reference import attention as ref_attention
    from reference import slots as ref_slots

    e = min(args.reference_tokens, args.encoder_len)
    row = list(range(1, cdiv(e, args.kbs) + 1))
    start = time.perf_counter()
    ref_slots.cross_attention_slots(row, e, args.kbs, e)
    t_slots = time.perf_counter() - start
    gen = torch.Generator().manual_seed(2)
    keys = torch.randn(e, args.head_dim, generator=gen).double().tolist()
    q = torch.randn(1, args.head_dim, generator=gen).double().tolist()
    start = time.perf_counter()
    ref_attention.attention(q, keys, keys, 1 / math.sqrt(args.head_dim))
    t_attn = time.perf_counter() - start
    kv_bytes = e * args.head_dim * 8 * 2
    return [
        ("reference (python)", "slot mapping", e / t_slots, e * 20 / t_slots / 1e9),
        ("reference (python)", "attention", e / t_attn, kv_bytes / t_attn / 1e9),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cuda = torch.cuda.is_available()
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if cuda else "cpu")
    parser.add_argument("--impls", default="torch,triton", help="comma-separated --impl specs")
    parser.add_argument("--requests", type=int, default=None, help="requests in the step")
    parser.add_argument("--encoder-len", type=int, default=None, help="encoder tokens per request")
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--head-dim", type=int, default=None)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--kbs", type=int, default=16, help="kernel block size (divides --block-size)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--reference-tokens", type=int, default=512)
    # The nox `benchmarks` session passes the same arguments to every script: ignore others'.
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        print(f"(ignoring arguments for other benchmarks: {' '.join(unknown)})", file=sys.stderr)
    big = args.device == "cuda"  # a Nemotron-Parse page per request on a GPU; small on CPU
    args.requests = args.requests or (64 if big else 4)
    args.encoder_len = args.encoder_len or (3329 if big else 512)
    args.heads = args.heads or (8 if big else 2)
    args.head_dim = args.head_dim or (128 if big else 32)
    args.repeats = args.repeats or (20 if big else 3)

    print(f"device {args.device}; {args.requests} requests x {args.encoder_len} encoder tokens, "
          f"{args.heads} heads x {args.head_dim}, {args.dtype}, bs {args.block_size} kbs {args.kbs}")
    rows = []
    for spec in [s for s in args.impls.split(",") if s]:
        impl = load_impl(spec, args.device)
        rows += bench_impl(impl, args)
    rows += bench_reference(args)
    width = max(len(r[0]) for r in rows)
    print(f"{'implementation':<{width}}  {'kernel':<16}  {'tokens/s':>12}  {'GB/s':>9}")
    for name, kernel, rate, gbs in rows:
        print(f"{name:<{width}}  {kernel:<16}  {rate:>12.4g}  {gbs:>9.4g}")
    if args.device == "cpu" and "triton" in args.impls:
        print("(triton on cpu runs in Triton's interpreter: a cost for CI, not a kernel speed)")


if __name__ == "__main__":
    main()
