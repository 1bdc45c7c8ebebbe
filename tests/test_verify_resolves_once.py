"""verify resolves each ``--policy`` once (issue 48, item 5): the plan's subject is handed to the suite's
in-process run (:class:`crossattn_sizing.runs.pytest_plugin.ResolvedPolicy`), never resolved again from
its spec by the plugin. Counted where both would do it, so a second resolution fails the test."""

from __future__ import annotations

import types

import pytest

from crossattn_sizing.commands import verify as verify_command
from crossattn_sizing.commands.cli import main
from crossattn_sizing.runs import pytest_plugin
from crossattn_sizing.specs import resolve


def test_verify_resolves_the_policy_once_and_the_suite_runs_that_object(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    resolved: list[str] = []
    loaded: list[object] = []

    def counting(spec: str, *args: object, **kwargs: object) -> resolve.Subject:
        subject = resolve.resolve_policy(spec, *args, **kwargs)  # type: ignore[arg-type]
        resolved.append(spec)
        loaded.append(subject.loaded)
        return subject

    seen: list[object] = []
    real = pytest_plugin.resolved_policy

    def recording(config: pytest.Config) -> object:
        policy = real(config)
        seen.append(policy)
        return policy

    monkeypatch.setattr(verify_command, "resolve_policy", counting)
    monkeypatch.setattr(pytest_plugin, "resolve_policy", counting)
    monkeypatch.setattr(pytest_plugin, "resolved_policy", recording)
    one = "test_column_of_is_the_oracle_column"  # one cheap property: resolutions are what is counted
    code = main(["verify", "--policy", "mrv2", "-k", one, "--max-examples", "2", "--seed", "1",
                 "--jobs", "1"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert resolved == ["mrv2"]  # the plan's resolution, and no other
    assert seen and all(policy is loaded[0] for policy in seen)  # the suite ran the plan's object


def test_a_run_given_another_spec_resolves_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A handed-in policy serves only the ``--policy`` it was resolved for."""
    handed = pytest_plugin.ResolvedPolicy("mrv2", object())  # type: ignore[arg-type]

    class Config:
        run = pytest_plugin.HarnessRun(pytest_plugin.RegressionFiles())
        stash = types.MappingProxyType({pytest_plugin.RUN: run})
        pluginmanager = type("PM", (), {"get_plugins": staticmethod(lambda: [handed])})()

        @staticmethod
        def getoption(name: str) -> str:
            return {"sizing_policy": "v1"}[name]

    assert pytest_plugin.resolved_policy(Config()) is not handed.policy  # type: ignore[arg-type]
    Config.getoption = staticmethod(lambda name: "mrv2")  # type: ignore[method-assign]
    assert pytest_plugin.resolved_policy(Config()) is handed.policy  # type: ignore[arg-type]
