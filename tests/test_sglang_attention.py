"""SGLang's attention step as the range table declares it, and what ``verify --engine sglang`` runs.

The property itself and its mutations are tests/meta/test_meta_sglang_attention.py.
"""

from __future__ import annotations

import types

import pytest

from crossattn_sizing.engine.adapter import AdapterGap
from crossattn_sizing.engine.sglang import family, releases
from crossattn_sizing.engine.sglang.attention_client import pack, unpack
from tests.sglang_tree import FIXTURE

BACKEND = "srt/layers/attention/torch_native_backend.py: TorchNativeAttnBackend"


def test_the_ranges_from_0_5_13_run_the_backend_as_own_code_with_its_stand_ins() -> None:
    for rng in family.RANGES[:-1]:
        assert BACKEND in rng.own_code and "srt/mem_cache/memory_pool.py: KVWriteLoc" in rng.own_code
        assert any(piece.startswith("token_to_kv_pool") for piece, _ in rng.stand_ins)
    oldest = family.RANGES[-1]
    assert BACKEND not in oldest.own_code
    assert "the attention property is not run" in oldest.note and "is_cross_attn" in oldest.note


def test_the_oldest_range_is_an_adapter_gap_naming_the_backend() -> None:
    pytest.importorskip("torch")
    from crossattn_sizing.engine.sglang.attention import backend_class

    oldest = types.SimpleNamespace(root=FIXTURE / "not-loaded", range=releases.RANGES[-1])
    with pytest.raises(AdapterGap, match=r"TorchNativeAttnBackend has no cross-attention path"):
        backend_class(oldest)  # type: ignore[arg-type]


def test_verify_runs_the_attention_property_beside_the_read_and_write_sides() -> None:
    suite = family.FAMILY.verify_suite("sglang==0.5.23")
    assert suite.files == ("properties/test_read_coverage.py", "properties/sglang_attention.py")
    assert suite.startup_files == ("properties/sglang_startup.py",)
    assert "test_cross_attention_matches_reference" not in suite.known_failures


def test_content_travels_as_float32_bytes() -> None:
    pytest.importorskip("torch")
    values = [0.5, -1.25, 3.0, 1e-3, 2.0, -0.0]
    assert unpack(pack(values), (2, 3)).flatten().tolist() == pytest.approx(values, rel=1e-7)
    assert unpack(pack([]), (0, 4)).shape == (0, 4)
