"""The one exit-status ladder of every command's verdicts
(:func:`crossattn_sizing.base.outcome.exit_status`)."""

from __future__ import annotations

import pytest

from crossattn_sizing.base import interrupts, standard_output
from crossattn_sizing.base.outcome import EXIT_BAD_INPUT, EXIT_INTERRUPTED, Outcome, exit_status

V = Outcome


@pytest.mark.parametrize(
    ("outcomes", "interrupted", "status"),
    [
        ([V.HOLDS], False, 0),
        ([V.HOLDS, V.NOT_APPLICABLE, V.ABSENT], False, 0),  # nothing to judge is no reason for 3
        ([V.HOLDS, V.ERROR], False, 0),  # an error is counted by the command (verify: unexpected -> fails)
        ([V.HOLDS, V.FAILS, V.NOT_RUN], False, 1),  # a failure outranks what did not run
        ([V.HOLDS, V.NOT_RUN], False, 3),
        ([V.UNREADABLE], False, 3),
        ([V.INTERRUPTED], False, 3),
        ([], False, 3),  # nothing judged is never a pass
        ([V.FAILS], True, 130),  # Ctrl-C outranks everything
        ([], True, 130),
    ],
)
def test_the_ladder(outcomes: list[Outcome], interrupted: bool, status: int) -> None:
    assert exit_status(iter(outcomes), interrupted) == status


def test_one_name_for_each_status_outside_the_verdicts() -> None:
    assert interrupts.EXIT_STATUS == EXIT_INTERRUPTED == 130
    assert standard_output.EXIT_STATUS == EXIT_BAD_INPUT == 2
