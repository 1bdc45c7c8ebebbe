"""``prove``: the vectorised exhaustive check agrees with the scalar definitions, on small domains."""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from crossattn_sizing import prove as prove_mod
from crossattn_sizing.base.errors import HarnessError, NotExpressible
from crossattn_sizing.commands.cli import main
from crossattn_sizing.core.config import GroupKind, KVCacheGroup, RunnerConfig
from crossattn_sizing.core.policies import BUILTIN_POLICIES, SizingPolicy, policy_from_spec, widths
from crossattn_sizing.prove import (
    ABSENT,
    Domain,
    DomainError,
    edges,
    group_table,
    parse_values,
    prove,
    prove_all,
    scalar_check,
    vector_form,
    vector_widths,
)
from crossattn_sizing.prove import sweep as prove_sweep
from crossattn_sizing.prove.batches import sample_indices
from crossattn_sizing.prove.verify_row import prove_property
from tests.broken_policies import BROKEN

SMALL = {
    "block_sizes": "1-8,12,16",
    "dcp_sizes": "1-3",
    "max_model_lens": "1-40:13",
    "encoder_budgets": "1-300:23",
    "source_positions": "absent,0,7,200",
}


def small_domain(**changes: str) -> Domain:
    return Domain.parse(**(SMALL | changes))


TINY_LENGTHS = ["--encoder-budget", "1-20:3", "--source-positions", "absent", "--no-progress"]


def user_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str) -> None:
    """A user's ``module:attr`` policy: ``source`` (which may use ``widths``) importable as ``module``."""
    (tmp_path / f"{module}.py").write_text("from crossattn_sizing.core.policies import widths\n" + source)
    monkeypatch.syspath_prepend(str(tmp_path))


def all_failures_by_loop(domain: Domain, policy) -> list[tuple]:  # type: ignore[no-untyped-def]
    """Every failing config in canonical order, by a plain Python loop over the scalar check."""
    t = domain.groups
    lengths = list(zip(*(a.tolist() for a in domain.lengths(0, domain.num_lengths)), strict=True))
    out = []
    for bs, kbs, dcp_size, inter in zip(*(a.tolist() for a in t), strict=True):
        for m, e, s in lengths:
            config = RunnerConfig(
                max_model_len=m,
                max_num_batched_tokens=max(m, e),
                groups=(KVCacheGroup(GroupKind.CROSS, bs, kbs),),
                max_num_encoder_input_tokens=e,
                max_source_positions=None if s == ABSENT else s,
                dcp_size=dcp_size,
                dcp_interleave=inter,
            )
            found = scalar_check(policy, config)
            if found is not None:
                out.append(found)
    return out


@functools.cache
def expected_failures(name: str) -> tuple[Domain, list[prove_mod.Counterexample]]:
    """The loop's answer on the chunking test's domain, computed once per policy."""
    domain = small_domain(block_sizes="1-8,12", dcp_sizes="1-2", encoder_budgets="1-300:37")
    return domain, all_failures_by_loop(domain, BUILTIN_POLICIES[name])


def _canonical_key(c: prove_mod.Counterexample) -> tuple[int, ...]:
    s = ABSENT if c.max_source_positions is None else c.max_source_positions
    return (
        c.block_size, c.kernel_block_size, c.dcp_size, c.dcp_interleave,
        c.max_model_len, c.max_num_encoder_input_tokens, s,
    )  # fmt: skip


# ------------------------------------------------------------ vectorised == scalar


def test_vector_widths_equal_scalar_widths_on_random_configs() -> None:
    """The numpy mirror and policies.widths cannot drift: 4000 random configs, every rule pair."""
    rng = np.random.default_rng(20260626)
    n = 4000
    bs = rng.integers(1, 1025, n)
    kbs = np.array([rng.choice([d for d in range(1, b + 1) if b % d == 0]) for b in bs.tolist()])
    dcp_size = rng.integers(1, 9, n)
    inter = np.array([rng.choice([d for d in range(1, k + 1) if k % d == 0]) for k in kbs.tolist()])
    m = rng.integers(1, 20000, n)
    e = rng.integers(1, 20000, n)
    s = np.where(rng.random(n) < 0.3, ABSENT, rng.integers(0, 20000, n))
    configs = [
        RunnerConfig(
            max_model_len=int(m[i]),
            max_num_batched_tokens=int(max(m[i], e[i])),
            groups=(KVCacheGroup(GroupKind.CROSS, int(bs[i]), int(kbs[i])),),
            max_num_encoder_input_tokens=int(e[i]),
            max_source_positions=None if s[i] == ABSENT else int(s[i]),
            dcp_size=int(dcp_size[i]),
            dcp_interleave=int(inter[i]) if dcp_size[i] > 1 else 1,
        )
        for i in range(n)
    ]
    for length, alignment in itertools.product(("fixed", "prefix", "v1"), ("none", "pow2", "gcd")):
        fast = vector_widths(length, alignment, bs, kbs, dcp_size, m, e, s)
        slow = [widths(c, length, alignment)[0] for c in configs]
        assert fast.tolist() == slow, (length, alignment)


@pytest.mark.parametrize(("tile", "chunk"), [(5, 3), (64, 50), (prove_sweep.TILE, 10**6)])
@pytest.mark.parametrize("name", ["mrv2-prefix", "mrv2-prefix-noalign", "mrv2-prefix-gcd"])
def test_vectorised_failures_are_exactly_the_scalar_ones(
    monkeypatch: pytest.MonkeyPatch, name: str, tile: int, chunk: int
) -> None:
    """Same count and same canonical order, however the product is cut into chunks and tiles."""
    monkeypatch.setattr(prove_sweep, "TILE", tile)
    domain, expected = expected_failures(name)
    result = prove(domain, BUILTIN_POLICIES[name], examples=len(expected) + 1, chunk_size=chunk)
    assert result.vectorised
    assert result.failures == len(expected) > 0
    assert result.counterexamples == expected
    assert [_canonical_key(c) for c in expected] == sorted(_canonical_key(c) for c in expected)


def test_first_n_counterexamples_are_the_canonical_first_n() -> None:
    domain = small_domain()
    policy = BUILTIN_POLICIES["mrv2-prefix"]
    result = prove(domain, policy, examples=5, chunk_size=7)
    assert result.counterexamples == all_failures_by_loop(domain, policy)[:5]


# ------------------------------------------------------------ what prove finds


def test_mrv2_prefix_counterexamples_are_nemotron_shaped() -> None:
    """Every failure of the pre-fix length has e > max(M, S): the encoder outgrows the row."""
    domain = small_domain(block_sizes="1-8", dcp_sizes="1-2")
    result = prove(domain, BUILTIN_POLICIES["mrv2-prefix-noalign"], examples=10**5)
    assert result.failures == len(result.counterexamples) > 0
    for c in result.counterexamples:
        assert c.encoder_len > max(c.max_model_len, c.max_source_positions or 0)
    assert any(c.max_source_positions is None for c in result.counterexamples)


def test_nemotron_parse_page_overflows_prefix_sizing() -> None:
    """2048x1664 page: 3329 tokens, bs 16, M 2048 -> 128 columns against 209 (docs/spec.md §8)."""
    domain = Domain.parse(
        block_sizes="16",
        kernel_block_sizes="16",
        max_model_lens="2048,3328,9000",
        encoder_budgets="3329",
        source_positions="absent",
    )
    result = prove(domain, BUILTIN_POLICIES["mrv2-prefix"])
    assert [(c.max_model_len, c.entries_needed, c.entries_given) for c in result.counterexamples] == [
        (2048, 209, 128),
        (3328, 209, 208),
    ]
    assert prove(domain, BUILTIN_POLICIES["mrv2"]).holds


@pytest.mark.parametrize("name", sorted(BUILTIN_POLICIES))
def test_builtins_hold_exactly_when_expected(name: str) -> None:
    policy = BUILTIN_POLICIES[name]
    result = prove(small_domain(dcp_sizes="1-4"), policy)
    assert result.holds is policy.expected_to_hold


def test_mrv2_holds_with_every_kernel_block_size_and_interleave() -> None:
    domain = small_domain(block_sizes="1-64", dcp_sizes="1-8", encoder_budgets="1-2000:41")
    result = prove(domain, BUILTIN_POLICIES["mrv2"])
    assert result.holds and result.configs == domain.size > 10**6


# A lone cross group is sharded, so dcp_on_replicated is right on every prove domain; every
# config of a prove domain sets E, so budget_only_if_set (which forgets E's default) is too.
OUTSIDE_PROVE = {"dcp_on_replicated", "budget_only_if_set"}
# Need what the small domain below lacks: lengths past 64K, block sizes above 128.
OUTSIDE_SMALL = OUTSIDE_PROVE | {"capped_length", "floor_for_large_blocks"}


@pytest.mark.parametrize("name", sorted(set(BROKEN) - OUTSIDE_SMALL))
def test_broken_policies_are_caught_through_the_scalar_fallback(name: str) -> None:
    """Each broken width formula (tests/broken_policies.py) fails somewhere on a small domain."""
    domain = small_domain(block_sizes="1-8", dcp_sizes="1-2", max_model_lens="1-40:13")
    result = prove(domain, BROKEN[name], examples=3)
    assert not result.vectorised
    assert not result.holds
    assert len(result.counterexamples) == 3
    assert all(max(c.entries_needed, c.entries_allocated) > c.entries_given for c in result.counterexamples)


class Batched:
    """A policy answering through ``widths_many`` only (as an engine policy does), counting its calls."""

    def __init__(self, policy, fail_on=None) -> None:  # type: ignore[no-untyped-def]
        self.policy, self.fail_on, self.batches, self.singles, self.ended = policy, fail_on, 0, 0, 0
        self.sizes: list[int] = []  # configs per batch: each batch's sample is asked again singly
        self.__name__ = f"batched {getattr(policy, '__name__', policy)}"

    def end_batches(self) -> None:
        self.ended += 1

    def __call__(self, config: RunnerConfig) -> tuple[int, ...]:
        self.singles += 1
        return self.policy(config)

    def widths_many(self, configs: list[RunnerConfig]) -> list:  # type: ignore[type-arg]
        self.batches += 1
        self.sizes.append(len(configs))
        out: list = []  # type: ignore[type-arg]
        for config in configs:
            if self.fail_on is not None and self.fail_on(config):
                return [*out, RuntimeError("worker died (SIGSEGV) while running widths_many")]
            out.append(self.policy(config))
        return out


@pytest.mark.parametrize("name", sorted(set(BROKEN) - OUTSIDE_SMALL))
def test_broken_policies_are_caught_through_widths_many(name: str) -> None:
    """Meta-test: the batched path finds exactly what one call per config finds, and calls singly only to
    cross-check a sample of each batch (prove.batches.cross_check) and to re-check counterexamples."""
    domain = small_domain(block_sizes="1-8", dcp_sizes="1-2", max_model_lens="1-40:13")
    policy = Batched(BROKEN[name])
    batched, single = prove(domain, policy, examples=3), prove(domain, BROKEN[name], examples=3)
    assert batched.batched and not single.batched and policy.batches > 0
    sampled = sum(len(sample_indices(n)) for n in policy.sizes)
    assert policy.singles == 3 + sampled  # the counterexamples' scalar re-check, and each batch's sample
    assert not batched.holds and batched.failures == single.failures
    assert batched.counterexamples == single.counterexamples
    assert policy.ended == 0 and prove_all([domain, domain], policy).failures == 2 * single.failures
    assert policy.ended == 1  # once, when the whole run is done


def test_a_batch_item_that_raised_stops_prove_at_that_config() -> None:
    """An exception answered for a config (a worker crash, say) is that config's failure, named."""
    domain = small_domain(block_sizes="4,8", dcp_sizes="1", max_model_lens="1,40")
    policy = Batched(BUILTIN_POLICIES["mrv2"], fail_on=lambda c: c.encoder_budget > 200)
    with pytest.raises(prove_mod.PolicyRaised, match="RuntimeError: worker died") as info:
        prove(domain, policy)
    first = next(c for j in range(domain.num_lengths) if (c := domain.config(0, j)).encoder_budget > 200)
    assert info.value.config == first and isinstance(info.value.error, RuntimeError)


def test_widths_many_must_answer_each_config_once() -> None:
    class Short(Batched):
        def widths_many(self, configs: list[RunnerConfig]) -> list:  # type: ignore[type-arg]
            return [self.policy(c) for c in configs[1:]]

    domain = small_domain(block_sizes="4", dcp_sizes="1", max_model_lens="1,40")
    with pytest.raises(HarnessError, match=r"did not answer each of its \d+ configs exactly once"):
        prove(domain, Short(BUILTIN_POLICIES["mrv2"]))


def test_cli_prove_reports_a_policy_that_raises_as_bad_input_naming_the_config(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tile the policy cannot answer is exit 2 with the config and its replay, never a verdict."""
    user_policy(tmp_path, monkeypatch, "my_raising", (
        "def breaks(config):\n"
        "    if config.encoder_budget == 13:  # not the probe config: a load-time check passes\n"
        "        raise ValueError('too long for me')\n"
        "    return widths(config, 'fixed', 'gcd')\n"
    ))  # fmt: skip
    out_json = tmp_path / "prove.json"
    assert main(["prove", "--policy", "my_raising:breaks", "--block-size", "4", "--max-model-len", "4",
                 *TINY_LENGTHS, "--json", str(out_json)]) == 2  # fmt: skip
    out, err = capsys.readouterr()
    said = [line for line in err.splitlines() if "error:" in line]
    assert len(said) == 1 and "raised ValueError: too long for me" in said[0] and "E=13" in said[0], err
    assert "replay: crossattn-sizing check --policy my_raising:breaks" in said[0]
    assert "holds" not in out and "Traceback" not in out + err
    data = json.loads(out_json.read_text())
    assert data["holds"] is False and data["verdict"] == "bad input"
    assert data["raised_on"]["max_num_encoder_input_tokens"] == 13


@pytest.mark.parametrize("name", sorted(set(BROKEN) - OUTSIDE_PROVE))
def test_edge_domain_catches_every_broken_policy_in_its_reach(name: str) -> None:
    """Two parts of the default domain: a non-power-of-two and a large block size, under DCP."""
    parts = edges.edge_domain(block_sizes=(48, 256), dcp_sizes=(2,))
    result = prove_all(parts, BROKEN[name], examples=2)
    assert not result.holds and result.configs == sum(p.size for p in parts)
    assert all(max(c.entries_needed, c.entries_allocated) > c.entries_given for c in result.counterexamples)


def test_edge_domain_verdicts_of_the_builtins_and_its_edges() -> None:
    parts = edges.edge_domain()
    for name, policy in BUILTIN_POLICIES.items():
        assert prove_all(parts, policy, examples=0).holds is policy.expected_to_hold, name
    coverage = edges.edge_coverage(parts)
    assert coverage.dense_checked == coverage.dense_edges > 0
    assert 0 < coverage.checked < coverage.all_edges
    for part in parts:
        axis = part.encoder_budgets
        assert axis.min() >= 1 and axis.max() <= edges.MAX_TOKENS
        assert {(1 << 20) - 1, 1 << 20, (1 << 20) + 1} <= set(axis.tolist())  # 1M contexts
        for u in edges.units(int(part.block_sizes[0]), int(part.dcp_sizes[0])):
            assert {u - 1, u, u + 1} - {0} <= set(axis.tolist())


def test_policy_widths_fast_configs_equal_validated_ones() -> None:
    """The fast scalar path hands the policy configs equal to fully built ones."""
    domain = small_domain(block_sizes="3,16", dcp_sizes="1-2", max_model_lens="1,40",
                          encoder_budgets="1-300:97")
    seen: list[RunnerConfig] = []

    def spy(config: RunnerConfig) -> tuple[int, ...]:
        seen.append(config)
        return widths(config, "fixed", "gcd")

    prove(domain, spy)
    assert len(seen) == domain.size
    t = domain.groups
    expected = [domain.config(g, j) for g in range(t.block_size.size) for j in range(domain.num_lengths)]
    assert sorted(map(repr, seen)) == sorted(map(repr, expected))
    assert all(c == RunnerConfig.from_dict(c.to_dict()) for c in seen)


def test_subclass_overriding_call_is_not_trusted_to_be_vectorisable() -> None:
    class OffByOne(SizingPolicy):
        def __call__(self, config: RunnerConfig) -> tuple[int, ...]:
            return tuple(w - 1 for w in super().__call__(config))

    policy = OffByOne("off-by-one", "fixed", "none", "broken", False)
    assert vector_form(policy) is None
    domain = small_domain(block_sizes="1-4", dcp_sizes="1", max_model_lens="1,9", encoder_budgets="1-30:7")
    result = prove(domain, policy, examples=1)
    assert not result.vectorised and not result.holds
    assert vector_form(BUILTIN_POLICIES["mrv2"]) == ("fixed", "gcd")
    assert vector_form(SizingPolicy("odd", "fixed", "pow3", "unknown rule", True)) is None  # type: ignore[arg-type]


# ------------------------------------------------------------ domain


def test_group_table_is_every_valid_shape_in_canonical_order() -> None:
    table = group_table(np.array([1, 4, 6, 12]), np.array([1, 2, 3]), None)
    got = list(zip(*(a.tolist() for a in table), strict=True))
    expected = [
        (bs, kbs, c, i)
        for bs in (1, 4, 6, 12)
        for kbs in range(1, bs + 1)
        if bs % kbs == 0
        for c in (1, 2, 3)
        for i in (range(1, kbs + 1) if c > 1 else [1])
        if kbs % i == 0
    ]
    assert got == expected
    for bs, kbs, c, i in got:  # the engine's own validation accepts each of them
        RunnerConfig(8, 8, (KVCacheGroup("cross", bs, kbs),), dcp_size=c, dcp_interleave=i)


def test_size_is_counted_without_materialising_the_product() -> None:
    huge = {"max_model_lens": "1-1000000", "encoder_budgets": "1-1000000",
            "source_positions": "absent,0-1000000"}  # fmt: skip
    domain = Domain.parse(block_sizes="1-512", dcp_sizes="1-8", **huge)
    assert domain.size == domain.groups.block_size.size * 10**12 * 1_000_002
    assert domain.size > 2**63  # a Python int: no numpy array of that size exists


def test_parse_values_ranges_steps_and_absent() -> None:
    got = parse_values("absent,0-10:5,3,7-7", "--source-positions", minimum=0, maximum=99, allow_absent=True)
    assert got.tolist() == [ABSENT, 0, 3, 5, 7, 10]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--max-model-len", "5-1"], "--max-model-len '5-1': start 5 is greater than end 1"),
        (["--encoder-budget", "0-10"], "--encoder-budget '0-10': values must lie in 1.."),
        (["--block-size", "absent"], "--block-size 'absent': 'absent' is only allowed"),
        (["--dcp", "1-8:0"], "--dcp '1-8:0': step must be >= 1"),
        (["--source-positions", "abc"], "item 'abc' is not N, LO-HI or LO-HI:STEP"),
        (["--max-model-len", "1-4096,"], "item '' is not N, LO-HI or LO-HI:STEP"),
        (["--block-size", "4", "--kernel-block-size", "3"], "no listed kernel block size divides"),
        (["--block-size", "1-65536", "--dcp", "1-1024"], "group shapes (bs, kbs, C, I) exceed"),
        (["--max-model-len", "1-99999999999"], "--max-model-len '1-99999999999': values must lie in"),
        (["--examples", "-1"], "--examples '-1': must be an integer >= 0"),
        (["--chunk-size", "0"], "--chunk-size '0': must be an integer >= 1"),
        (["--policy", "no-such-policy"], "unknown sizing policy 'no-such-policy'"),
    ],
)
def test_bad_arguments_exit_2_with_one_line_naming_the_option(
    capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    # The case's options take the place of the small domain's (an option is given once).
    options = {"--policy": "mrv2", "--block-size": "1-4", "--max-model-len": "1-9", "--encoder-budget": "1-9",
               "--source-positions": "absent"}  # fmt: skip
    options.update(zip(argv[::2], argv[1::2], strict=True))
    assert main(["prove", *(word for pair in options.items() for word in pair)]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and "\n" not in err


def test_domain_errors_are_harness_errors() -> None:
    with pytest.raises(HarnessError):
        parse_values("9-1", "--dcp", minimum=1, maximum=8)
    assert issubclass(DomainError, HarnessError)


# ------------------------------------------------------------ CLI


CLI_DOMAIN = ["--block-size", "1-16", "--dcp", "1-2", "--max-model-len", "1-64:9"]
CLI_DOMAIN += ["--encoder-budget", "1-400:17", "--source-positions", "absent,0,100", "--no-progress"]


def test_cli_exit_0_when_it_holds(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_file = tmp_path / "prove.json"
    assert main(["prove", "--policy", "mrv2", *CLI_DOMAIN, "--json", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert "mrv2: holds on the whole domain" in out
    data = json.loads(out_file.read_text())
    n = data["configs_checked"]
    assert f"covered: {n:,} of the domain's {n:,} configs (100%)" in out
    assert data["holds"] is True and data["counterexamples"] == []
    assert data["configs_checked"] == small_domain(
        block_sizes="1-16", dcp_sizes="1-2", max_model_lens="1-64:9", encoder_budgets="1-400:17",
        source_positions="absent,0,100",
    ).size  # fmt: skip


def test_cli_exit_1_with_counterexamples(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_file = tmp_path / "prove.json"
    argv = ["prove", "--policy", "mrv2-prefix", *CLI_DOMAIN, "--examples", "3", "--json", str(out_file)]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "mrv2-prefix: FAILS on" in out
    assert "first 3 counterexamples in (bs, kbs, C, I, M, E, S) order" in out
    assert "needed  allocated  given" in out
    data = json.loads(out_file.read_text())
    assert data["holds"] is False and len(data["counterexamples"]) == 3
    assert data["counterexamples_total"] >= 3
    first = data["counterexamples"][0]
    assert first["entries_needed"] > first["entries_given"]


SHORT_BY_ONE = ("def short_by_one(config):\n"
                "    return tuple(max(w - 1, 0) for w in widths(config, 'fixed', 'none'))\n")  # fmt: skip
"""A user's policy one column short of the unaligned widths, with no vectorised form."""


def test_cli_user_policy_falls_back_and_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user_policy(tmp_path, monkeypatch, "my_sizing", SHORT_BY_ONE)
    argv = ["prove", "--policy", "my_sizing:short_by_one", "--block-size", "1-4", "--max-model-len", "1-9"]
    assert main([*argv, *TINY_LENGTHS]) == 1
    captured = capsys.readouterr()
    assert "has no vectorised form; asking it in batches (widths_many)" in captured.err
    assert "batched calls (widths_many)" in captured.out  # an isolated policy is always asked in batches


def test_cli_default_is_the_edge_domain_and_says_what_it_covers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prove", "--policy", "mrv2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    size = sum(p.size for p in edges.edge_domain())
    assert f"domain: {size:,} configs (edge domain, 24 parts)" in out
    assert "edges of the first 8 multiples of each: 1,584 of 1,584 checked" in out


def test_cli_dry_run_counts_only(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["prove", "--policy", "mrv2", "--max-model-len", "1-1000000", "--encoder-budget", "1-1000000"]
    assert main([*argv, "--source-positions", "absent", "--dry-run"]) == 0
    domain = Domain.parse(max_model_lens="1-1000000", encoder_budgets="1-1000000", source_positions="absent")
    assert f"domain: {domain.size:,} configs" in capsys.readouterr().out


def test_loaded_builtin_is_the_vectorised_object() -> None:
    assert vector_form(policy_from_spec("mrv2-prefix")) == ("prefix", "pow2")


class Unrepresentable:
    """An engine-like policy whose release cannot represent a kernel block smaller than the block."""

    def __init__(self, policy, batched: bool = False) -> None:  # type: ignore[no-untyped-def]
        self.policy = policy
        if batched:
            self.widths_many = lambda configs: [self._answer(c) for c in configs]

    def _answer(self, config: RunnerConfig):  # type: ignore[no-untyped-def]
        try:
            return self(config)
        except NotExpressible as exc:
            return exc

    def __call__(self, config: RunnerConfig) -> tuple[int, ...]:
        if any(g.kbs < g.block_size for g in config.groups):
            raise NotExpressible(f"no kernel block sizes in this release ({config.describe()})")
        return self.policy(config)


@pytest.mark.parametrize("batched", [False, True], ids=["one-call", "widths_many"])
def test_configs_an_engine_cannot_represent_are_counted_not_judged(batched: bool) -> None:
    """They neither fail the row (the release cannot be asked) nor count as holding."""
    domain = small_domain(block_sizes="4,8", dcp_sizes="1", max_model_lens="1,40")
    split = sum(1 for kbs, bs in zip(domain.groups.kernel_block_size, domain.groups.block_size, strict=True)
                if kbs < bs) * domain.num_lengths  # fmt: skip
    result = prove(domain, Unrepresentable(BUILTIN_POLICIES["mrv2"], batched))
    assert 0 < result.not_judged == split < result.configs
    assert result.holds and result.judged == result.configs - split
    broken = prove(domain, Unrepresentable(BROKEN["floor_div"], batched))  # meta: still caught where judged
    assert not broken.holds and broken.failures > 0 and broken.not_judged == split


def test_a_domain_the_engine_cannot_represent_at_all_is_not_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    domain = small_domain(block_sizes="4", dcp_sizes="1", max_model_lens="1,40")
    nothing = prove(domain, Unrepresentable(lambda c: (_ for _ in ()).throw(NotExpressible("never"))))
    assert nothing.judged == 0 and not nothing.holds and nothing.failures == 0
    row = prove_property(Unrepresentable(BUILTIN_POLICIES["mrv2"]), "engine", [small_domain(
        block_sizes="4", dcp_sizes="1", max_model_lens="1,40")])  # fmt: skip
    assert row.outcome == "holds" and "not judged" in row.reason and row.examples < domain.size
    user_policy(tmp_path, monkeypatch, "my_unrepresentable", (
        "from crossattn_sizing.base.errors import NotExpressible\n"
        "def never(config):\n"
        "    if len(config.groups) == 2:  # the two-group probe config answers; the domain's do not\n"
        "        return widths(config, 'fixed', 'gcd')\n"
        "    raise NotExpressible('this engine has no such config')\n"
    ))  # fmt: skip
    assert main(["prove", "--policy", "my_unrepresentable:never", "--block-size", "4", "--max-model-len",
                 "5", *TINY_LENGTHS]) == 3  # fmt: skip
    out = capsys.readouterr().out
    assert "NOT RUN: no config of the domain could be judged" in out and "not judged: " in out
