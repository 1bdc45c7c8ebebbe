"""A prove tile as it crosses to a policy's worker, and a worker's packed answers as the judge reads them.

Why: ``prove`` sends a ``module:attr`` policy's worker a tile as its base
configs and one packed array of lengths (:class:`ConfigTile`), and reads the
answers back as arrays (:class:`PackedWidths`). The worker must be asked
exactly the configs the judge judges, and every value it sends must still be
checked, a bad one refused as in process.
"""

from __future__ import annotations

import numpy as np
import pytest

from crossattn_sizing.base.errors import PolicyCallError
from crossattn_sizing.core.config_tile import ConfigTile
from crossattn_sizing.core.policies import MAX_WIDTH
from crossattn_sizing.prove import Domain
from crossattn_sizing.prove.batches import PackedWidths, tile_configs
from tests.processes import cli, run

DOMAIN = Domain.parse(block_sizes="1-8", dcp_sizes="1,2", max_model_lens="1-64:7", encoder_budgets="1-64:9",
                      source_positions="absent,0,40")  # fmt: skip


def test_a_tile_holds_the_domains_own_configs_and_crosses_unchanged() -> None:
    t = DOMAIN.groups
    g1, j0, j1 = min(5, t.block_size.size), 3, min(40, DOMAIN.num_lengths)
    tile = tile_configs(DOMAIN, 0, g1, j0, j1)
    expected = [DOMAIN.config(g, j) for g in range(g1) for j in range(j0, j1)]
    assert len(tile) == len(expected) == g1 * (j1 - j0)
    assert list(tile) == expected  # built without validation, equal to the validated configs
    assert [tile[i] for i in range(len(tile))] == expected
    assert tile[-1] == expected[-1] and tile[2:5] == expected[2:5]
    sources = {c.max_source_positions for c in tile}
    assert None in sources and 0 in sources
    crossed = ConfigTile.from_dict(tile.to_dict())  # what the worker builds from what crosses
    assert list(crossed) == expected
    with pytest.raises(IndexError):
        tile[len(tile)]


def test_a_tiles_parts_are_its_configs_in_order() -> None:
    """An engine policy's requests: one base and at most ``size`` lengths each, nothing lost or repeated."""
    tile = tile_configs(DOMAIN, 0, 3, 0, min(10, DOMAIN.num_lengths))
    parts = list(tile.parts(4))
    assert all(len(p.bases) == 1 and 1 <= len(p) <= 4 for p in parts)
    assert [c for p in parts for c in p] == list(tile)
    assert len(parts) == 3 * -(-int(tile.m.size) // 4)


def test_joined_packed_answers_keep_each_parts_items_at_their_place() -> None:
    refusal = PolicyCallError("no answer")
    first = PackedWidths(np.array([1, -1], dtype=np.int32), np.array([5], dtype=np.int64), {1: refusal})
    second = PackedWidths(np.array([2, -1, 1], dtype=np.int32), np.array([1, 2, 3], dtype=np.int64),
                          {1: "x"})  # fmt: skip
    joined = PackedWidths.joined([first, second])
    assert [joined[i] for i in range(len(joined))] == [(5,), refusal, (1, 2), "x", (3,)]


def test_each_access_is_a_fresh_config() -> None:
    tile = tile_configs(DOMAIN, 0, 1, 0, 4)
    first = tile[0]
    object.__setattr__(first, "max_model_len", 10**6)  # a policy scribbling on its config
    assert tile[0].max_model_len != 10**6


def test_packed_widths_judge_every_value() -> None:
    lens = np.array([1, 1, 1, 2, -1, 1, 0], dtype=np.int32)
    flat = np.array([7, -1, MAX_WIDTH + 1, 3, 4, MAX_WIDTH], dtype=np.int64)
    refusal = PolicyCallError("no answer")
    packed = PackedWidths(lens, flat, {4: refusal})
    widths, ok = packed.single_widths()
    assert ok.tolist() == [True, False, False, False, False, True, False]
    assert widths[ok].tolist() == [7, MAX_WIDTH]
    assert [packed[i] for i in range(len(packed))] == [(7,), (-1,), (MAX_WIDTH + 1,), (3, 4), refusal,
                                                         (MAX_WIDTH,), ()]  # fmt: skip


@pytest.mark.parametrize(
    ("lens", "flat", "items"),
    [([1, 1], [1], {}), ([1, 1], [1, 2, 3], {}), ([1, -1], [1], {}), ([1, 1], [1, 2], {1: "x"})],
    ids=["too-few-ints", "too-many-ints", "item-missing", "item-extra"],
)
def test_a_packed_answer_that_does_not_add_up_is_refused(
    lens: list[int], flat: list[int], items: dict[int, str]
) -> None:
    with pytest.raises(PolicyCallError, match="does not account"):
        PackedWidths(np.array(lens, dtype=np.int32), np.array(flat, dtype=np.int64), dict(items))


def test_a_bad_width_in_a_packed_batch_is_refused_as_in_process() -> None:
    """Meta: one negative width among thousands crossing packed fails prove, naming the config."""
    args = ("--block-size", "1-8", "--max-model-len", "1-64:7", "--encoder-budget", "1-64:7", "--no-progress")
    lines = []
    for mode in ((), ("--in-process",)):
        done = run(cli("prove", "--policy", "tests.hostile_code:negative_at_m8", *args, *mode))
        assert done.returncode == 2, done.stdout + done.stderr
        said = (done.stdout + done.stderr).strip().splitlines()
        lines.append([line for line in said if "-3" in line])
    assert lines[0] and lines[0] == lines[1], lines
    assert "prove stopped there" in lines[0][0] and '"max_model_len":8' in lines[0][0]
