"""The one vocabulary of verdicts: what any check of a policy can end as.

Every report of the package (verify's table and JSON, fuzz's summary, the
audit, ``reproduce``) states its verdicts with these members, never with
strings or booleans of its own, so "holds" means the same thing everywhere:
it ran, and nothing was shown wrong.

A member *is* its printed word (a ``str``), so JSON files, tables and the exit
statuses built on them read exactly as the words did; a word read back from
JSON becomes a member again with ``Outcome(word)``.

Only :attr:`HOLDS`, :attr:`FAILS` and :attr:`LATENT` are judgements of the policy:
:attr:`LATENT` is a violation found only on a case no served request reaches
(docs/spec.md §12), never counted as failing and never filed upstream. The rest say
why there is none: it was never reached (:attr:`NOT_RUN`), Ctrl-C stopped it
(:attr:`INTERRUPTED`), or it was not judged: the property does not apply
(:attr:`NOT_APPLICABLE`), the policy could not be loaded or run
(:attr:`ERROR`), the audit could not read a release's sizing
(:attr:`UNREADABLE`) or the release has no such runner (:attr:`ABSENT`).

:func:`exit_status` turns a run's outcomes into the process's exit status, the
one ladder every command uses (README, "Exit statuses"; docs/statuses.md).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable


class Outcome(str, enum.Enum):
    """How a check of a policy ended; the value is the word every report prints."""

    HOLDS = "holds"
    FAILS = "fails"
    LATENT = "latent"
    NOT_RUN = "not run"
    INTERRUPTED = "interrupted"
    NOT_APPLICABLE = "n/a"
    ERROR = "error"
    UNREADABLE = "could not be read"
    ABSENT = "absent"

    def __str__(self) -> str:
        # The word itself in f-strings and rich markup, on every Python (3.12 changed the default).
        return self.value

    @property
    def judged(self) -> bool:
        """Whether this is a judgement of the policy (holds, fails or latent), not a reason there is none."""
        return self in (Outcome.HOLDS, Outcome.FAILS, Outcome.LATENT)


EXIT_HOLDS = 0
"""Every verdict holds (a policy expected to fail that fails is caught, and counts as holding; a latent
violation, which no served request reaches, is not a failure)."""
EXIT_FAILS = 1
"""A policy or implementation fails: a verdict, and nothing else."""
EXIT_BAD_INPUT = 2
"""Bad input, or an output (standard output included) that cannot be written; never a verdict."""
EXIT_INCOMPLETE = 3
"""Nothing failed, but something was not judged (not run, could not be read), or nothing was."""
EXIT_INTERRUPTED = 130
"""Ctrl-C, SIGTERM or SIGHUP stopped the run (128 + SIGINT, as a shell reports it)."""

UNJUDGED = frozenset({Outcome.NOT_RUN, Outcome.INTERRUPTED, Outcome.UNREADABLE})
"""Outcomes that leave a run incomplete (:data:`EXIT_INCOMPLETE`) when nothing failed.
:attr:`~Outcome.NOT_APPLICABLE` and :attr:`~Outcome.ABSENT` do not: there was nothing to judge."""


def exit_status(outcomes: Iterable[Outcome], interrupted: bool = False) -> int:
    """The exit status of a run whose verdicts are ``outcomes``, in order of precedence: 130 when
    ``interrupted``, 1 when one fails, 3 when there are none or one is :data:`UNJUDGED`, else 0.

    Each command passes the outcomes its statuses are about (verify: each policy's
    against what is expected of it, see
    :attr:`~crossattn_sizing.runs.verify_report.PolicyVerdict.counted`).
    """
    if interrupted:
        return EXIT_INTERRUPTED
    seen = set(outcomes)
    if Outcome.FAILS in seen:
        return EXIT_FAILS
    if not seen or seen & UNJUDGED:
        return EXIT_INCOMPLETE
    return EXIT_HOLDS
