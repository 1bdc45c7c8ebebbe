"""``--engine`` means the same in every command (issue 36, items 1-3): one registry, one protocol.

- every registered family implements :class:`~crossattn_sizing.engine.interface.EngineFamily`;
- no command imports an engine family's sub-package (only the registry and the shared machinery);
- ``verify --engine vllm==X`` builds the very plan ``--policy vllm==X --impl vllm==X`` builds;
- ``verify --engine sglang@T`` writes the JSON, JUnit and Markdown reports through the same writer.
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path
from typing import Any

import pytest

from crossattn_sizing.commands import verify as verify_command
from crossattn_sizing.commands.cli import main
from crossattn_sizing.engine.interface import EngineFamily, EngineMode, ReleaseRange, WrongMode
from crossattn_sizing.engine.registry import ENGINES, PER_MODE, engine_name, family
from crossattn_sizing.releases.versions import release_key, series_key
from tests.sglang_tree import SPEC

COMMANDS = Path(__file__).resolve().parents[1] / "src" / "crossattn_sizing" / "commands"


@pytest.mark.parametrize("name", list(ENGINES))
def test_each_registered_family_implements_the_protocol(name: str) -> None:
    found: EngineFamily = family(name)
    assert found.name == name
    assert found.ranges and all(isinstance(r, ReleaseRange) for r in found.ranges)
    for member in ("check_spec", "subject_spec", "refused", "obtain", "verify_suite", "command",
                   "unsupported", "subject_lines", "policy", "impl", "property_fixture", "sizer", "tree",
                   "report_facts"):  # fmt: skip
        assert callable(getattr(found, member)), member
    assert "--policy" in found.refused("verify")  # an engine answers the policy question itself
    assert isinstance(found.mode, EngineMode)
    # A piece of another mode's contract is the caller's bug, said as such, never a None to test for.
    own = set(PER_MODE[found.mode])
    other = {m for mode, ms in PER_MODE.items() if mode is not found.mode for m in ms} - own
    for member in sorted(other - {"subject_lines"}):
        with pytest.raises(WrongMode, match=f"{name} .*has no {member}"):
            getattr(found, member)(f"{name}@/nowhere", *(["cpu"] if member == "impl" else []))


def test_no_command_imports_an_engine_family() -> None:
    """Commands reach an engine only through the registry: adding one never edits a command."""
    found = []
    for path in sorted(COMMANDS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.name}: {n}" for n in names
                      if any(n.startswith(f"crossattn_sizing.engine.{e}") for e in ENGINES)]  # fmt: skip
    assert not found, found


def test_engine_names_and_release_order() -> None:
    assert [engine_name(s) for s in ("vllm", "vllm==0.25.0", "sglang@/x==y", " sglang==0.5.23")] == [
        "vllm", "vllm", "sglang", "sglang"]  # fmt: skip
    # One parser orders every release number as pip does: .dev < a < rc < final < .post; 0.24 is 0.24.0.
    order = ["0.34.0.dev1", "0.34.0a1", "0.34.0rc1", "0.34.0", "0.34.0.post1", "0.34.1"]
    assert sorted(reversed(order), key=release_key) == order
    assert release_key("0.5.23") > release_key("0.5.9") and release_key("0.24") == release_key("0.24.0")  # type: ignore[operator]
    assert release_key("0.24.1.dev5+g1a2b") == release_key("0.24.1.dev5") and release_key("next") is None
    # A range's membership: a pre-release of X counts as X, a post release does not.
    assert series_key("0.25.0rc1") == series_key("0.25.0") < series_key("0.25.0.post1")  # type: ignore[operator]


def _plans(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> Any:
    """The VerifyPlan ``verify argv`` builds (the policies resolved by name only, nothing run)."""
    seen: list[Any] = []

    def fake_verify(plan: Any) -> Any:
        seen.append(plan)
        raise SystemExit(0)

    monkeypatch.setattr(verify_command, "resolve_policy", lambda spec, isolation=None: spec)
    monkeypatch.setattr(verify_command, "verify", fake_verify)
    with pytest.raises(SystemExit):
        main(["verify", *argv])
    return seen[0]


def test_verify_engine_vllm_is_policy_and_impl(monkeypatch: pytest.MonkeyPatch) -> None:
    by_engine = _plans(monkeypatch, ["--engine", "vllm==0.25.0"])
    by_options = _plans(monkeypatch, ["--policy", "vllm==0.25.0", "--impl", "vllm==0.25.0"])
    assert by_engine == by_options
    assert (by_engine.specs, by_engine.impl) == (["vllm==0.25.0"], "vllm==0.25.0")


def test_an_engine_command_it_lacks_is_refused_in_one_line() -> None:
    from crossattn_sizing.base.errors import OptionError
    from crossattn_sizing.commands.engines import engine_of

    args = argparse.Namespace(engine=SPEC, policy=None, impl=None, call_timeout=None, in_process=False)
    engine = engine_of(args, "fuzz")
    assert engine is not None and engine.subject is None
    with pytest.raises(OptionError, match="fuzz cannot run sglang"):
        engine.command("fuzz")


def test_verify_engine_sglang_writes_every_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's run: the three files are written (they were not), through runs/outputs.py."""
    pytest.importorskip("transformers", reason="the 'hf' extra is not installed")
    out = {"--json": tmp_path / "a.json", "--junit-xml": tmp_path / "a.xml", "--markdown": tmp_path / "a.md"}
    code = main(["verify", "--engine", SPEC, "--max-examples", "3", "--seed", "1",
                 *[w for flag, path in out.items() for w in (flag, str(path))]])  # fmt: skip
    printed = capsys.readouterr().out
    data = json.loads(out["--json"].read_text())
    assert data["exit_status"] == code and data["policies"][0]["policy"] == SPEC
    assert data["impl"] == SPEC and data["device"] == "cpu"
    names = {p["name"].split("::")[-1] for p in data["policies"][0]["properties"]}
    assert names == {"test_gathers_stay_in_row_and_own_columns",
                     "test_reads_beyond_served_batches_are_latent",
                     "test_admitted_requests_fit_their_shared_row",
                     "test_cross_attention_matches_reference",
                     "test_capture_batches_fit_their_rows", "test_padded_replay_fits_its_rows"}  # fmt: skip
    assert "<testsuites" in out["--junit-xml"].read_text()
    assert out["--markdown"].read_text().startswith(f"# crossattn-sizing verify (impl={SPEC}")
    assert SPEC in printed


def test_verify_engine_sglang_gives_call_timeout_to_its_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """``verify --engine sglang@T --call-timeout S``: the worker started before the suite and the suite's
    read builder both run each call under S (the option is not refused, nor ignored)."""
    seen: dict[str, Any] = {}
    sglang = type(family("sglang"))

    def obtain(self: Any, spec: str, call_timeout: float | None = None) -> str:
        seen["obtain"] = call_timeout
        return ""

    def engine_verify(spec: str, suite: Any, **_: Any) -> Any:
        seen["pytest_args"] = suite.pytest_args
        raise SystemExit(0)

    monkeypatch.setattr(sglang, "obtain", obtain)
    monkeypatch.setattr(verify_command, "engine_verify", engine_verify)
    with pytest.raises(SystemExit):
        main(["verify", "--engine", SPEC, "--call-timeout", "7"])
    assert seen["obtain"] == 7.0
    args = list(seen["pytest_args"])
    assert args[args.index("--call-timeout") + 1] == "7.0" and "--read-builder" in args


def test_a_family_that_leaves_its_own_mode_to_the_defaults_is_not_one() -> None:
    """A plug-in's family found through the entry point is checked against its mode: a SIZER family that
    inherits OtherModes' ``sizer`` (which raises WrongMode) would otherwise fail at the first call."""
    from crossattn_sizing.engine.interface import OtherModes
    from crossattn_sizing.engine.registry import contract_problem

    class Half(OtherModes):
        name, mode, ranges = "half", EngineMode.SIZER, ()

        def check_spec(self, spec: str, option: str = "--engine") -> str:
            return spec

        refused = obtain = tree = report_facts = command = unsupported = check_spec

    assert contract_problem(Half(), "half") == "a sizer family needs verify_suite, sizer"
    assert contract_problem(Half(), "other") == "its name 'half' is not the entry point's 'other'"
    assert all(contract_problem(family(name), name) == "" for name in ENGINES)
