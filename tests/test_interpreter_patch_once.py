"""The worker's "tl patched once per launch" shim: same results, fewer re-patches, and only where redundant.

Triton's interpreter re-patches ``triton.language`` at every ``@triton.jit``
helper call inside a launch (the tree's helpers, and ``tl.sum``/``tl.max``,
which are helpers of Triton's own). The shim
(:func:`crossattn_sizing.engine.vllm.shims.cpu_kernels`) skips a re-patch of
modules already patched in that launch. Each check runs in a fresh
interpreter, as a worker does, so this process's Triton stays as it was.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.processes import interpreted_with_and_without_shims

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    os.environ.update({"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""})
    import torch
    import triton
    import triton.language as tl
    from triton.runtime import interpreter
    from crossattn_sizing.engine.vllm.shims import cpu_kernels

    calls = {"real": 0}
    real = interpreter._patch_lang

    def counted(fn):  # counts the patches that reach Triton's own _patch_lang
        calls["real"] += 1
        return real(fn)

    interpreter._patch_lang = counted  # before the shim, which then wraps it
    applied = cpu_kernels(torch) if sys.argv[1] == "on" else []

    @triton.jit
    def helper(x, y):  # a helper of the kernel's own module: its globals hold tl
        return tl.maximum(x, y) * 2.0

    @triton.jit
    def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for i in range(3):
            acc = helper(acc, x + i)
        total = tl.sum(acc, axis=0) + tl.max(x, axis=0)  # Triton's own helpers: globals hold tl.core
        tl.store(out_ptr + pid, total)

    x = torch.arange(64, dtype=torch.float32) / 7
    out = torch.empty(4)
    kernel[(4,)](x, out, 64, BLOCK=16)
    again = torch.empty(4)
    kernel[(4,)](x, again, 64, BLOCK=16)  # a second launch: patched anew, as before
    print(json.dumps({"out": out.tolist(), "again": again.tolist(), "real": calls["real"],
                      "applied": applied}))
    """
)


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, object]]:
    return interpreted_with_and_without_shims(SCRIPT)


def test_the_kernel_computes_the_same_with_and_without_the_shim(runs: dict[str, dict[str, object]]) -> None:
    assert runs["on"]["out"] == runs["off"]["out"]
    assert runs["on"]["again"] == runs["off"]["again"] == runs["off"]["out"]


def test_the_shim_is_reported(runs: dict[str, dict[str, object]]) -> None:
    assert "triton interpreter: tl patched once per launch" in runs["on"]["applied"]  # type: ignore[operator]


def test_only_the_first_patch_of_each_language_module_in_a_launch_reaches_triton(
    runs: dict[str, dict[str, object]],
) -> None:
    # Without the shim: per launch, its own patch, plus one per helper call in each of its 4 programs
    # (3 calls of helper, tl.sum, tl.max, and whatever those call): dozens.
    assert int(runs["off"]["real"]) > 2 * (1 + 4 * 5)  # type: ignore[call-overload]
    # With it: per launch, the launch's own (tl) and the first helper holding tl.core (tl.sum): 2 each.
    assert runs["on"]["real"] == 2 * 2
