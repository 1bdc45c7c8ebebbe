"""The sizing's ``deepcopy(kv_cache_config)`` builds the harness's fresh config again: same widths, a copy.

vLLM's ``initialize_kv_cache`` starts by deep-copying the config it is
handed. The worker hands it one built for that call alone, so
:meth:`crossattn_sizing.engine.vllm.release.Engine.copy_of_fresh` builds it
again instead of walking it (half a config's cost in ``prove``). These checks
run the recorded 0.24.0 and 0.25.0 trees in a fresh interpreter, as a worker
does, so this process never imports a release.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from tests.engine_tree import build_tree
from tests.processes import run

SCRIPT = textwrap.dedent(
    """
    import copy, json, sys
    from crossattn_sizing.engine.vllm import shims
    from crossattn_sizing.engine.vllm.release import FRESH_COPY, Engine
    from crossattn_sizing.prove.edges import edge_domain
    from crossattn_sizing.prove.batches import tile_configs

    shimmed = Engine("cpu", shims.set_cpu_environment())
    plain = Engine("cpu", [])
    plain.resolve_for_sizing = plain.resolve  # the release's own deepcopy
    configs = []
    for part in edge_domain()[::7]:  # every seventh part: block sizes, DCP sizes, S absent or not
        configs += [c.to_dict() for c in tile_configs(part, 0, 1, 0, min(300, part.num_lengths))]
    answers = {name: e.op_widths_many({"configs": configs, "runner": "v2"})["results"]
               for name, e in (("shimmed", shimmed), ("plain", plain))}

    # What the copy is: distinct from the config handed in, equal in value, once per call.
    kv = shimmed.kv
    spec = kv.FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=4, dtype=shimmed.torch.float32)
    def build():
        groups = [kv.KVCacheGroupSpec(["l"], spec)]
        return kv.KVCacheConfig(num_blocks=8, kv_cache_tensors=[], kv_cache_groups=groups)
    handed = build()
    shimmed._fresh = (handed, build)
    first = shimmed.copy_of_fresh(handed)
    second = shimmed.copy_of_fresh(handed)  # no longer the call's own: the real deepcopy
    other = {"rows": [[1, 2]]}
    print(json.dumps({
        "configs": len(configs), "same": answers["shimmed"] == answers["plain"],
        "ok": sum("result" in a for a in answers["plain"]),
        "distinct": first is not handed and second is not handed and first is not second,
        "equal": first == handed == second, "rebuilt": shimmed._fresh is None,
        "others_copied": shimmed.copy_of_fresh(other) == other and shimmed.copy_of_fresh(other) is not other,
        "reported": FRESH_COPY in shimmed.shims, "not_reported_without": FRESH_COPY not in plain.shims,
    }))
    """
)


@pytest.fixture(scope="module", params=["0.24.0", "0.25.0"])
def checked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tree = build_tree(tmp_path_factory.mktemp("tree") / request.param, request.param)
    done = run([sys.executable, "-c", SCRIPT], env={"PYTHONPATH": str(Path(tree))})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_widths_are_those_of_the_releases_own_deepcopy(checked: dict[str, object]) -> None:
    assert checked["same"] is True
    assert int(checked["ok"]) > 1000 and int(checked["configs"]) >= int(checked["ok"])  # type: ignore[call-overload]


def test_the_copy_is_a_distinct_equal_config_made_once_per_call(checked: dict[str, object]) -> None:
    assert checked["distinct"] is True and checked["equal"] is True and checked["rebuilt"] is True


def test_anything_else_gets_the_real_deepcopy(checked: dict[str, object]) -> None:
    assert checked["others_copied"] is True


def test_the_shim_is_reported_where_it_was_used(checked: dict[str, object]) -> None:
    assert checked["reported"] is True and checked["not_reported_without"] is True
