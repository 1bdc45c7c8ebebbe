"""The release's own KV write, attention and merge as ``--impl``: recorded 0.25.0 kernels, no download.

tests/engine_tree.py installs the three recorded kernel files
(tests/fixtures/vllm/0.25.0/) into the minimal package, so the worker finds
and runs them exactly as it does in an unpacked wheel. The kernels are
interpreted (seconds per attention example), so the properties run here with
a handful of examples; the same on the real wheels, for 0.25.0 and 0.34.0,
is tests/test_engine_real.py (``nox -s engine``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from crossattn_sizing.core.policies import BUILTIN_POLICIES
from crossattn_sizing.core.slot_layout import SlotLayout
from crossattn_sizing.engine.client import EngineWorker, Inexpressible
from crossattn_sizing.engine.install import Release
from crossattn_sizing.engine.vllm.adapters import BACKEND_PATH, CPU_BF16, DCP_STAND_IN, VllmImpl
from crossattn_sizing.engine.vllm.kernels import BACKEND
from crossattn_sizing.impl import keyword_call_problems, provenance_lines
from crossattn_sizing.impl.attention import lse_merge, torch_paged_attention, torch_write_kv
from crossattn_sizing.impl.step import AttentionStep, WriteStep
from tests.engine_tree import FIXTURES, build_tree

MRV2 = BUILTIN_POLICIES["mrv2"]
REPO = Path(__file__).resolve().parent.parent
# Interpreted kernels in a worker: one to three seconds per attention example on 2 cores.
# Four examples per property keep this file near two minutes; no shrinking (it replays
# hundreds of examples), as in an engine run (crossattn_sizing.engine.budget).
ENGINE = settings(settings.get_profile("ci"), max_examples=4, print_blob=False,
                  phases=[Phase.explicit, Phase.generate])  # fmt: skip

SPLIT_END = "    split_kv_end = tl.minimum(split_kv_start + kv_len_per_split, cur_batch_seq_len{})\n"
CONTEXT = "    context_len = seq_len - cur_batch_query_len{}\n"
BROKEN = {
    "write_kv": ("triton_reshape_and_cache_flash.py", "    block_offset = slot_idx % block_size\n",
                 "    block_offset = (slot_idx + 1) % block_size\n"),
    "backend": ("triton_unified_attention.py", CONTEXT.format(""), CONTEXT.format(" + 1")),
    "paged_attention": ("triton_decode_attention.py", SPLIT_END.format(""), SPLIT_END.format(" + 1")),
    "merge": ("common.py", "    lse_finally = lse_tmp - lse\n", "    lse_finally = lse_tmp - lse_max\n"),
}  # fmt: skip
"""One line changed in a recorded kernel (its first occurrence: the write kernel, ``unified_attention``
(what the Triton backend runs at C = 1), the MHA decode kernel's first stage (what stands in with DCP),
the DCP correction): the write lands one cell over; each query sees one key past its causal bound;
attention reads one key past its length; each rank's partial is weighed against the largest LSE
instead of their sum."""
DCP_STEPS = ("paged_attention", "merge")
"""Steps that run only with DCP (C > 1): their meta-tests draw configs that reach them."""


def broken_source(step: str) -> dict[str, str]:
    name, line, changed = BROKEN[step]
    text = (FIXTURES / "0.25.0" / name).read_text()
    assert line in text, f"{name}: the line to break is not there"
    return {name: text.replace(line, changed, 1)}


def _impl(root: Path, **tree: object) -> tuple[VllmImpl, EngineWorker]:
    worker = EngineWorker(Release("0.25.0", [str(build_tree(root, "0.25.0", **tree))]))  # type: ignore[arg-type]
    return VllmImpl("vllm==0.25.0", worker=worker), worker


@pytest.fixture(scope="module")
def impl(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    made, worker = _impl(tmp_path_factory.mktemp("vllm-kernels"), kernels=True)
    yield made
    worker.close()


def test_provenance_names_the_releases_function_for_every_step(impl: VllmImpl) -> None:
    assert impl.provenance == {
        "slot_mapping": "vllm.v1.worker.gpu.block_table.BlockTables.compute_slot_mappings",
        "write_kv": "vllm.v1.attention.ops.triton_reshape_and_cache_flash.triton_reshape_and_cache_flash",
        "paged_attention": f"{BACKEND} ({BACKEND_PATH}) at C = 1",
        "merge": "vllm.v1.attention.ops.common.cp_lse_ag_out_ar",
    }
    assert impl.notes["paged_attention"] == f"with DCP (C > 1) {DECODE} {DCP_STAND_IN}"
    assert "FLASH_ATTN or FLASHINFER" in impl.notes["paged_attention"]
    assert impl.notes["merge"].startswith(
        "vllm.v1.attention.ops.triton_merge_attn_states.merge_attn_states where the head size or DCP size"
    )
    assert impl.stand_ins == {} and "all four steps vLLM's kernels" in impl.name
    assert provenance_lines(impl)[1].startswith("write_kv: vllm.")
    assert keyword_call_problems(impl) == []
    assert "torch.cuda.get_device_capability=(9, 0)" in impl.worker.request("kernels")["shims"]


def test_a_release_without_the_kernels_says_the_harness_stands_in(tmp_path: Path) -> None:
    made, worker = _impl(tmp_path)
    try:
        assert set(made.stand_ins) == {"write_kv", "paged_attention", "merge"}
        assert made.provenance["slot_mapping"].startswith("vllm.")
        stand_in = ("crossattn_sizing.impl.attention.lse_merge (harness stand-in: vLLM 0.25.0 has none of "
                    "vllm.v1.")
        assert made.provenance["merge"].startswith(stand_in)
        assert "harness stand-in for write_kv, paged_attention, merge" in made.name
    finally:
        worker.close()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_write_is_the_harness_write_bit_for_bit(impl: VllmImpl, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    key, value = (torch.randn(20, 2, 8, generator=gen).to(dtype) for _ in range(2))
    slots = torch.randperm(6 * 4, generator=gen)[:20].to(torch.int64)
    slots[[2, 7]] = -1  # padding: written nowhere
    caches = [torch.full((6, 4, 2, 8), float("nan"), dtype=dtype) for _ in range(4)]
    impl.write_kv(key=key, value=value, key_cache=caches[0], value_cache=caches[1], step=WriteStep(slots))
    torch_write_kv(key=key, value=value, key_cache=caches[2], value_cache=caches[3], step=WriteStep(slots))
    for got, want in ((caches[0], caches[2]), (caches[1], caches[3])):
        assert torch.equal(got.isnan(), want.isnan())  # the same cells written, the rest still poison
        assert torch.equal(got.nan_to_num(0.0), want.nan_to_num(0.0))


DECODE = "vllm.v1.attention.ops.triton_decode_attention.decode_attention_fwd"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", [SlotLayout(4, 2, 2, 0), SlotLayout(4, 2, 2, 1)],
                         ids=["dcp2-rank0", "dcp2-rank1"])
def test_attention_and_lse_match_the_harness_kernel(impl: VllmImpl, causal: bool, layout: SlotLayout) -> None:
    """With DCP the decode kernel stands in: two requests, a read that crosses into row 1's storage
    order, a query that sees nothing (rank 1)."""
    gen = torch.Generator().manual_seed(2)
    key_cache, value_cache = (torch.randn(8, 4, 2, 8, generator=gen) for _ in range(2))
    step = AttentionStep(
        table=torch.tensor([3, 1, 0, 5, 2, 7], dtype=torch.int32), row_stride=3,
        query_start_loc=torch.tensor([0, 3, 5], dtype=torch.int32),
        seq_lens=torch.tensor([9, 12], dtype=torch.int32),
        query_positions=torch.tensor([0, 5, 17, 20, 23]), layout=layout, causal=causal, scale=8**-0.5,
    )  # fmt: skip
    query = torch.randn(5, 2, 8, generator=gen)
    out, lse = impl.paged_attention(query=query, key_cache=key_cache, value_cache=value_cache, step=step)
    caches = {"key_cache": key_cache, "value_cache": value_cache}
    want_out, want_lse = torch_paged_attention(query=query, **caches, step=step)
    torch.testing.assert_close(out, want_out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse, want_lse, rtol=1e-5, atol=1e-6)  # -inf where a query sees no key


@pytest.mark.parametrize("causal", [False, True])
def test_the_backend_runs_at_c1_and_matches_the_harness_kernel(impl: VllmImpl, causal: bool) -> None:
    """C = 1: the Triton backend (builder, ``forward``, ``unified_attention``); a prefill request whose
    queries are its last three tokens, a decode request, a one-token prompt (cross-attention: a request
    with no keys); row 0's read crosses
    into row 1's storage order. The backend returns no LSE (NaN: nothing reads it with one rank)."""
    gen = torch.Generator().manual_seed(4)
    key_cache, value_cache = (torch.randn(8, 4, 2, 8, generator=gen) for _ in range(2))
    step = AttentionStep(
        table=torch.tensor([3, 1, 0, 5, 2, 7, 6, 4, 0], dtype=torch.int32), row_stride=3,
        query_start_loc=torch.tensor([0, 3, 4, 5], dtype=torch.int32),
        seq_lens=torch.tensor([9, 12, int(causal)], dtype=torch.int32),
        query_positions=torch.tensor([6, 7, 8, 11, 0] if causal else [0] * 5), layout=SlotLayout(4),
        causal=causal, scale=8**-0.5,
    )  # fmt: skip
    query = torch.randn(5, 2, 8, generator=gen)
    before = impl.calls.copy()
    out, lse = impl.paged_attention(query=query, key_cache=key_cache, value_cache=value_cache, step=step)
    assert impl.calls - before == {"paged_attention": 1, "backend_attention": 1, BACKEND: 1}
    want_out, _ = torch_paged_attention(query=query, key_cache=key_cache, value_cache=value_cache, step=step)
    torch.testing.assert_close(out, want_out, rtol=1e-5, atol=1e-6)
    assert lse.isnan().all()


def test_positions_the_backend_cannot_express_run_on_the_stand_in(impl: VllmImpl) -> None:
    """Causal queries that are not the last of their request's tokens: vLLM passes no positions, so the
    backend cannot be asked; the decode kernel answers instead (and says so in ``calls``)."""
    gen = torch.Generator().manual_seed(5)
    key_cache, value_cache = (torch.randn(4, 4, 1, 8, generator=gen) for _ in range(2))
    step = AttentionStep(
        table=torch.tensor([2, 1, 0], dtype=torch.int32), row_stride=3,
        query_start_loc=torch.tensor([0, 2], dtype=torch.int32),
        seq_lens=torch.tensor([9], dtype=torch.int32), query_positions=torch.tensor([2, 5]),
        layout=SlotLayout(4), causal=True, scale=8**-0.5,
    )  # fmt: skip
    query = torch.randn(2, 1, 8, generator=gen)
    before = impl.calls.copy()
    out, lse = impl.paged_attention(query=query, key_cache=key_cache, value_cache=value_cache, step=step)
    assert impl.calls - before == {"paged_attention": 1, DECODE: 1}
    caches = {"key_cache": key_cache, "value_cache": value_cache}
    want_out, want_lse = torch_paged_attention(query=query, **caches, step=step)
    torch.testing.assert_close(out, want_out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse, want_lse, rtol=1e-5, atol=1e-6)


CORRECT = "vllm.v1.attention.ops.common.cp_lse_ag_out_ar"
PAIRS = "vllm.v1.attention.ops.triton_merge_attn_states.merge_attn_states"


@pytest.mark.parametrize(("ranks", "head_dim", "ran"), [(2, 8, CORRECT), (4, 2, CORRECT), (3, 8, PAIRS),
                                                        (2, 3, PAIRS)])  # fmt: skip
def test_merge_matches_the_harness_merge(impl: VllmImpl, ranks: int, head_dim: int, ran: str) -> None:
    """The release's DCP correction where its kernel takes the shape, its two-way merge elsewhere."""
    gen = torch.Generator().manual_seed(3)
    outs = [torch.randn(4, 2, head_dim, generator=gen) for _ in range(ranks)]
    lses = [torch.randn(4, 2, generator=gen) for _ in range(ranks)]
    lses[1][0, 0] = float("-inf")  # a rank that holds none of this query's keys
    before = impl.calls.copy()
    torch.testing.assert_close(impl.merge(outs=outs, lses=lses), lse_merge(outs=outs, lses=lses))
    assert impl.calls - before == {"merge": 1, ran: 1}


def test_bf16_is_not_run_on_cpu_with_the_reason(impl: VllmImpl) -> None:
    """Triton's interpreter computes bf16 on the raw bits: no verdict, never a pass or failure."""
    key = torch.zeros(1, 1, 8, dtype=torch.bfloat16)
    cache = torch.zeros(1, 4, 1, 8, dtype=torch.bfloat16)
    with pytest.raises(Inexpressible, match="not run on CPU: Triton's interpreter computes bf16"):
        impl.write_kv(key=key, value=key, key_cache=cache, value_cache=cache.clone(),
                      step=WriteStep(torch.zeros(1, dtype=torch.int64)))  # fmt: skip
    assert "raw stored bits" in CPU_BF16

    seen: list[str] = []

    @settings(ENGINE, max_examples=3)
    @given(st.just(None))
    def inside(_: None) -> None:
        seen.append("ran")
        impl.write_kv(key=key, value=key, key_cache=cache, value_cache=cache.clone(),
                      step=WriteStep(torch.zeros(1, dtype=torch.int64)))  # fmt: skip

    with pytest.raises(Exception, match=r"Unsatisfiable|filter"):  # every example discarded: no verdict
        inside()
    assert seen


@pytest.mark.parametrize("guarded", [True, False])
def test_cross_attention_property_holds(impl: VllmImpl, guarded: bool) -> None:
    from properties.test_attention import check_cross_attention

    @ENGINE
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        check_cross_attention(data, impl, MRV2, guarded)

    before = impl.calls.copy()
    run()
    ran = impl.calls - before  # the property held on the kernels, not on discarded examples
    assert ran["write_kv"] >= 2 and ran["paged_attention"] >= 2, ran
    assert ran[BACKEND] >= 1, ran  # C = 1 examples ran the Triton backend


def test_self_attention_property_holds(impl: VllmImpl) -> None:
    from properties.test_attention import check_self_attention

    @ENGINE
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        check_self_attention(data, impl, MRV2)

    before = impl.calls.copy()
    run()
    ran = impl.calls - before
    assert ran["write_kv"] >= 2 and ran["paged_attention"] >= 2, ran
    assert ran[BACKEND] >= 1, ran


def test_dcp_self_attention_holds_on_the_releases_correction(impl: VllmImpl) -> None:
    """DCP 2 or 4: the ranks' partials combined by the release's ``cp_lse_ag_out_ar``; the property holds."""
    from properties.impl_strategies import correctable_dcp
    from properties.test_attention import check_self_attention

    @ENGINE
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        check_self_attention(data, impl, MRV2, **correctable_dcp())

    before = impl.calls.copy()
    run()
    ran = impl.calls - before
    assert ran[CORRECT] >= 1 and ran["paged_attention"] >= 2 and ran[DECODE] >= 2, ran


@pytest.mark.parametrize("step", sorted(BROKEN))
def test_a_kernel_with_one_line_changed_is_caught(tmp_path: Path, step: str) -> None:
    """Meta-test: the recorded tree with one kernel line changed fails the self-attention property.

    The decode kernel and the DCP correction only run with DCP (C > 1): for
    them the property draws configs and shapes the correction takes (DCP 2
    or 4, power-of-two head sizes), and the test checks that what it broke ran.
    ``unified_attention`` runs at C = 1 through the backend (the drawn configs
    include C = 1; the test checks the backend ran).
    """
    from properties.impl_strategies import correctable_dcp
    from properties.test_attention import check_self_attention

    broken, worker = _impl(tmp_path, kernels=True, kernel_sources=broken_source(step))
    dcp = correctable_dcp() if step in DCP_STEPS else {}

    @ENGINE
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        check_self_attention(data, broken, MRV2, **dcp)

    try:
        with pytest.raises(AssertionError, match=r"differs from dense attention|non-finite"):
            run()
        ran = {"merge": CORRECT, "paged_attention": DECODE, "backend": BACKEND}.get(step, "write_kv")
        assert broken.calls[ran] >= 1, broken.calls
    finally:
        worker.close()


# vllm@PATH: a source tree as the policy, the implementation, reproduce --engine and audit --------


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The recorded 0.25.0 package with its kernels, as a folder holding ``vllm/``; hermetic caches."""
    monkeypatch.setenv("CROSSATTN_ENGINE_CACHE", str(tmp_path / "engine-cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("CROSSATTN_OFFLINE", "1")
    return build_tree(tmp_path / "checkout", "0.25.0", kernels=True)


def test_a_source_tree_is_a_policy_and_an_implementation(tree: Path) -> None:
    from crossattn_sizing.engine.client import close_all
    from crossattn_sizing.specs.resolve import load_impl, load_policy
    from tests.test_engine_fixture import NEMOTRON

    try:
        policy = load_policy(f"vllm@{tree}")
        assert policy(NEMOTRON) == (216, 216) and policy.expected_to_hold  # type: ignore[attr-defined]
        made = load_impl(f"vllm@{tree / 'vllm'}", "cpu")  # the vllm/ folder itself is taken too
        assert isinstance(made, VllmImpl) and made.stand_ins == {}
        assert made.worker.release.label == f"vllm@{tree}"
        assert not (tree / "vllm" / "crossattn-engine.json").exists()  # nothing written into the tree
    finally:
        close_all()


def test_reproduce_takes_a_source_tree_as_its_engine(tree: Path) -> None:
    """``reproduce --engine vllm@PATH`` (the README's contributor workflow) names the tree, not a refusal;
    the full run on an unpacked wheel is in tests/test_engine_real.py."""
    from crossattn_sizing.specs.resolve import check_engine_spec

    assert check_engine_spec("--engine", f" vllm@{tree} ") == f"vllm@{tree}"


def test_a_folder_without_vllm_is_one_line(tmp_path: Path) -> None:
    from crossattn_sizing.base.errors import ReleaseUnavailable
    from crossattn_sizing.engine.install import resolve_release

    says = r"has no vllm package \(vllm@PATH takes a folder holding vllm/"
    with pytest.raises(ReleaseUnavailable, match=says):
        resolve_release(f"vllm@{tmp_path}")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "properties/test_slot_mapping.py", "--impl", f"vllm@{tmp_path}",
         "-p", "no:cacheprovider", "-q"],
        capture_output=True, text=True, check=False, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "has no vllm package" in proc.stderr


def test_audit_executes_a_source_tree(tree: Path, tmp_path: Path) -> None:
    """``audit --engine vllm@PATH`` reads the tree and executes its V2 sizing (reproduce: nox -s engine)."""
    report = tmp_path / "audit.json"
    audit = subprocess.run(
        [sys.executable, "-m", "crossattn_sizing", "audit", "--engine", f"vllm@{tree}", "--runner", "v2",
         "--json", str(report), "--markdown", str(tmp_path / "audit.md")],
        capture_output=True, text=True, check=False, timeout=600, env=dict(os.environ),
    )  # fmt: skip
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert f"running vllm@{tree}'s own V2 sizing" in audit.stderr
    assert '"path": "executed"' in report.read_text()


def _collect(tree: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "properties/test_slot_mapping.py", "--impl", f"vllm@{tree}",
         "--collect-only", "-p", "no:cacheprovider"],
        capture_output=True, text=True, check=False, timeout=300, cwd=REPO, env=dict(os.environ, **env),
    )  # fmt: skip


def test_the_pytest_header_names_each_kernel_and_the_engine_budget(tree: Path) -> None:
    proc = _collect(tree)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "engine budget: 10 examples per property, no shrinking" in proc.stdout
    for step in ("slot_mapping", "write_kv", "paged_attention", "merge"):
        assert f"impl vllm@{tree}: {step}: vllm." in proc.stdout
    bad = _collect(tree, CROSSATTN_ENGINE_EXAMPLES="many")
    assert bad.returncode == 4
    assert "CROSSATTN_ENGINE_EXAMPLES='many': must be a positive integer" in bad.stderr
