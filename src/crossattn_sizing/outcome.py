"""The one vocabulary of verdicts: what any check of a policy can end as.

Every report of the package (verify's table and JSON, fuzz's summary, the
audit, ``reproduce``) states its verdicts with these members, never with
strings or booleans of its own, so "holds" means the same thing everywhere:
it ran, and nothing was shown wrong.

A member *is* its printed word (a ``str``), so JSON files, tables and the exit
statuses built on them read exactly as the words did; a word read back from
JSON becomes a member again with ``Outcome(word)``.

Only :attr:`HOLDS` and :attr:`FAILS` are judgements of the policy. The rest say
why there is none: it was never reached (:attr:`NOT_RUN`), Ctrl-C stopped it
(:attr:`INTERRUPTED`), or it was not judged: the property does not apply
(:attr:`NOT_APPLICABLE`), the policy could not be loaded or run
(:attr:`ERROR`), the audit could not read a release's sizing
(:attr:`UNREADABLE`) or the release has no such runner (:attr:`ABSENT`).
"""

from __future__ import annotations

import enum


class Outcome(str, enum.Enum):
    """How a check of a policy ended; the value is the word every report prints."""

    HOLDS = "holds"
    FAILS = "fails"
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
        """Whether this is a judgement of the policy (holds or fails), not a reason there is none."""
        return self in (Outcome.HOLDS, Outcome.FAILS)
