"""The worker's two interpreter shims that drop dead work: same answers, and live checks still run.

"no dead overflow check": with ``debug`` off, Triton's interpreter computes an
int32 op's overflow condition in numpy and hands it to ``device_assert``,
which drops it. "numpy dtype looked up once": the type-to-numpy table is
rebuilt at every call. Both are applied by
:func:`crossattn_sizing.engine.vllm.shims.cpu_kernels` in a vLLM worker; each
check here runs in a fresh interpreter, as a worker does, so this process's
Triton stays as it was.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.processes import interpreted_with_and_without_shims

SCRIPT = textwrap.dedent(
    """
    import dataclasses, json, os, sys
    os.environ.update({"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""})
    import torch
    import triton
    import triton.language as tl
    from triton.runtime import interpreter
    from crossattn_sizing.engine.vllm.shims import cpu_kernels

    checks = {"overflow": 0}
    real_check = interpreter.interpreter_semantic.binary_op_sanitize_overflow_impl

    def counted(lhs, rhs, op):  # how often Triton's own check is entered
        checks["overflow"] += 1
        return real_check(lhs, rhs, op)

    interpreter.interpreter_semantic.binary_op_sanitize_overflow_impl = counted  # before the shim
    applied = cpu_kernels(torch) if sys.argv[1] == "on" else []

    @triton.jit
    def kernel(slot_ptr, src_ptr, out_ptr, scale, BLOCK: tl.constexpr, ROW: tl.constexpr):
        pid = tl.program_id(0)
        slot = tl.load(slot_ptr + pid)
        offs = tl.arange(0, BLOCK)
        row = (slot // ROW) * (ROW * BLOCK) + (slot % ROW) * BLOCK - 0 * pid
        x = tl.load(src_ptr + pid * BLOCK + offs, mask=offs < BLOCK - 1, other=0.0)
        tl.store(out_ptr + row + offs, (x * scale).to(tl.float16).to(tl.float32))

    slots = torch.tensor([5, 0, 3, 7, 1], dtype=torch.int32)
    src = torch.arange(5 * 8, dtype=torch.float32) / 3
    out = torch.zeros(8 * 8)
    kernel[(5,)](slots, src, out, 1.5, BLOCK=8, ROW=4)
    answers = {"out": out.tolist(), "checks_off": checks["overflow"], "applied": applied}

    # With debug on, the check is live: an int32 overflow must still stop the kernel.
    @triton.jit
    def overflow(x_ptr, out_ptr):
        tl.store(out_ptr, tl.load(x_ptr) * 2)

    builder = interpreter.interpreter_builder
    builder.options = dataclasses.replace(builder.options, debug=True)
    try:
        overflow[(1,)](torch.tensor([2**30 + 1], dtype=torch.int32), torch.zeros(1, dtype=torch.int32))
        answers["debug_overflow"] = "not caught"
    except Exception as err:  # the interpreter's assert, raised inside the program
        answers["debug_overflow"] = "int32 overflow" if "overflow" in str(err) else repr(err)

    # Every type the interpreter maps, scalar, pointer and block, gives Triton's own answer.
    kinds = [tl.int1, tl.int8, tl.uint8, tl.int16, tl.uint16, tl.int32, tl.uint32, tl.int64,
             tl.uint64, tl.float16, tl.bfloat16, tl.float32, tl.float64, tl.float8e5, tl.float8e4nv]
    kinds += [tl.pointer_type(k) for k in kinds] + [tl.block_type(k, [4]) for k in kinds]
    kinds += [tl.block_type(tl.pointer_type(tl.float32), [2, 8])]
    answers["np_dtypes"] = [str(interpreter._get_np_dtype(k)) for k in kinds * 2]
    print(json.dumps(answers))
    """
)


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, object]]:
    return interpreted_with_and_without_shims(SCRIPT)


def test_the_kernel_computes_the_same_with_and_without_the_shims(runs: dict[str, dict[str, object]]) -> None:
    assert runs["on"]["out"] == runs["off"]["out"]
    assert any(runs["off"]["out"])  # type: ignore[arg-type]  # the kernel wrote something to compare


def test_both_shims_are_reported(runs: dict[str, dict[str, object]]) -> None:
    applied = runs["on"]["applied"]
    assert "triton interpreter: no dead overflow check" in applied  # type: ignore[operator]
    assert "triton interpreter: numpy dtype looked up once" in applied  # type: ignore[operator]


def test_the_dead_check_is_skipped_only_while_debug_is_off(runs: dict[str, dict[str, object]]) -> None:
    # Without the shim Triton enters its check at the kernel's int32 ops; with it, never (debug off).
    assert int(runs["off"]["checks_off"]) > 0  # type: ignore[call-overload]
    assert runs["on"]["checks_off"] == 0
    # With debug on the check is live, and an int32 overflow is still caught under the shim.
    assert runs["off"]["debug_overflow"] == runs["on"]["debug_overflow"] == "int32 overflow"


def test_the_kept_numpy_dtypes_are_tritons_own(runs: dict[str, dict[str, object]]) -> None:
    assert runs["on"]["np_dtypes"] == runs["off"]["np_dtypes"]
    assert "uint64" in runs["on"]["np_dtypes"] and "float32" in runs["on"]["np_dtypes"]  # type: ignore[operator]
