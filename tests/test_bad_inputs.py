"""Every row of the bad-input table, through every command and the pytest plugin.

A row fails its command before any work starts where it can (exit 2 from the
console script, 4 from pytest: its usage error), says so in one line that names
the option or field and the rule, and never shows a traceback. Rows that
reach the property suite, and the plugin's rows, run in a fresh process; the
rest call the console script's ``main`` in this one (same code path, no
interpreter start-up per row).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crossattn_sizing.base.errors import MAX_LINE
from crossattn_sizing.commands.cli import main
from tests.bad_input_cases import CASES, Case, answer_lines, first_line, make_fixtures, run_isolated


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_fixtures(tmp_path_factory.mktemp("bad-inputs"))


def run_in_process(case: Case, d: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(case.argv(d))
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def needs_no_gpu(case: Case) -> None:
    if "cuda" in case.args:
        torch = pytest.importorskip("torch")
        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA; the row is about machines without it")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_gets_its_status_and_one_clear_line(
    case: Case, fixtures: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    needs_no_gpu(case)
    if case.isolated:
        code, out, err = run_isolated(case, fixtures)
    else:
        for key, value in case.environ(fixtures).items():
            monkeypatch.setenv(key, value)
        code, out, err = run_in_process(case, fixtures, capsys)
    shown = out + err
    assert code == case.status, shown[-3000:]
    assert "Traceback" not in shown, shown[-3000:]
    assert case.says in first_line(out, err), (first_line(out, err), shown[-2000:])
    assert len(first_line(out, err)) <= MAX_LINE + 100, "an error line echoes a value whole"
    if case.status == 2:
        said = answer_lines(err)
        assert len(said) == 1, said
        assert "holds" not in out
