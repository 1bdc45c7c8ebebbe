"""Read-side coverage: every column a metadata builder gathers lies in its row, and what the kernel
consumes lies in the request's own written columns.

The write-side properties show each token gets a column. This one shows the
backend only *reads* columns that exist: on SGLang's shared-row layout
(``[E encoder | d decoder]`` per request, ``context_len + 4`` wide) a page
table gathered per batch rather than per request can index past a row every
request of the batch fits in. Reads go through
:class:`~crossattn_sizing.core.read_gather.GuardedRows`, so the first read past
a row is reported with its row, column and width, and nothing past it is read.
The builder judged is ``--read-builder`` (default ``bounded``); batches come
from :func:`properties.read_strategies.mixed_batches`: only what a server can be
driven into (Mllama images of whole tiles, each request admitted by SGLang's
rule, the batch within the pool all at once), so its failures, shrunk inside
that domain, are ones a server reaches. The same read judged on batches no
server decodes (:func:`properties.read_strategies.unserved_batches`) is
reported, where it fails, as "latent: no served request reaches it": never a
failure of the engine, never written up for its tracker.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossattn_sizing.core.admission_rules import AdmissionUnanswered
from crossattn_sizing.core.check_line import batch_check_line as check_line
from crossattn_sizing.core.layouts import write_overflows
from crossattn_sizing.core.read_gather import Builder, first_read_violation
from crossattn_sizing.core.served import LATENT
from crossattn_sizing.findings.results import NOT_RUN_MARK

from .failures import fail, fail_latent, fail_rerun, rerun_command
from .read_strategies import ReadCase, admitted_batches, mixed_batches, unserved_batches


def _builder_option(builder: object) -> list[str]:
    from crossattn_sizing.core.read_gather import BUILDERS

    if hasattr(builder, "first_problem"):  # an SGLang tree's own builder: its spec
        return ["--read-builder", builder.name]  # type: ignore[attr-defined]
    names = [name for name, b in BUILDERS.items() if b is builder]
    return ["--read-builder", names[0]] if names else []


PAST_ROW = "a gathered column is outside the request's row"
NOT_WRITTEN = "a consumed column holds nothing its request wrote"
"""The headlines of a harness model builder's failure: which of :func:`first_read_violation`'s two checks."""


def _problem(builder: Builder | Any, case: ReadCase) -> tuple[str, str] | None:
    """``(headline, line)``: the first bad read of ``builder`` on ``case``, the headline naming the step that
    failed (a tree's: its gather, its extend, its kernel call's arguments, or its code not returning); a
    release that cannot run it is skipped as not run."""
    if not hasattr(builder, "first_finding"):
        line = first_read_violation(case.layout, case.batch, builder)
        if line is None:
            return None
        unwritten = line.startswith(("self-attention reads", "cross-attention reads"))
        return (NOT_WRITTEN if unwritten else PAST_ROW), line
    found = builder.first_finding(case.layout.context_len, case.triples())
    if found is None:
        return None
    kind, line, headline = found
    if kind == "not run":  # the adapter's gap: never a pass, never a failure of the release, never n/a
        pytest.skip(f"{NOT_RUN_MARK}{line}")  # the line names the release, the path and the piece
    return headline or "the release's step failed", line


def _read_lines(case: ReadCase, headline: str, problem: str) -> list[str]:
    """A bad read's diagnosis: its headline, the case, the read."""
    return [f"read-side coverage: {headline}", *case.lines(), f"  {problem}"]


def _replay(read_builder: Builder | Any, case: ReadCase) -> str | None:
    """The ``check`` line that replays ``case`` on an SGLang tree's own builder; None for a harness model
    (its failure reruns the test)."""
    if not hasattr(read_builder, "first_problem"):
        return None
    name: str = read_builder.name  # type: ignore[union-attr]  # a tree's builder (it has first_problem)
    return check_line(name, case.layout.context_len, case.rule.kv_capacity, case.triples())


@given(case=mixed_batches())
def test_gathers_stay_in_row_and_own_columns(case: ReadCase, read_builder: Builder) -> None:
    """No batch a server decodes makes the builder read past a row or consume a column it never wrote."""
    found = _problem(read_builder, case)
    if found is None:
        return
    lines = _read_lines(case, *found)
    replay = _replay(read_builder, case)
    if replay is not None:  # the release's own builder: `check --engine` replays it alone
        fail(lines, replay)
    fail_rerun(lines, _builder_option(read_builder))


# A quarter of the profile's examples: the served property above is the verdict; this one only says what
# lies beyond it, and each example on a tree is a call into the release.
assert settings.default is not None  # the plugin loaded a profile
LATENT_SHARE = settings(max_examples=max(1, settings.default.max_examples // 4))


@LATENT_SHARE
@given(case=unserved_batches())
def test_reads_beyond_served_batches_are_latent(case: ReadCase, read_builder: Builder) -> None:
    """The same read on batches no server decodes (any encoder length, the pool not held at once): a bad
    read there is latent (no served request reaches it), never a failure."""
    found = _problem(read_builder, case)
    if found is None:
        return
    lines = [*_read_lines(case, *found), f"  {LATENT}: {case.served_refusal()}"]
    replay = _replay(read_builder, case)
    fail_latent(lines, replay or rerun_command(_builder_option(read_builder)), reruns_test=replay is None)


def _admitted_by_the_tree(read_builder: Any, case: ReadCase, data: st.DataObject) -> ReadCase:
    """A batch for ``case``'s server drawn anew, each request admitted by the tree's own rule (its
    limits, its input check, its output cap: the engine fixture's ``admission``);
    a rule that does not answer skips as not run, or fails when the tree's code hung or exited."""
    context_len, kv_capacity = case.layout.context_len, case.rule.kv_capacity
    try:
        rule = read_builder.admission(context_len, kv_capacity)
        if isinstance(rule, dict):
            raise AdmissionUnanswered(rule)
        return data.draw(admitted_batches(rule, case.layout), label="a batch the tree's own rule admits")
    except AdmissionUnanswered as exc:
        if exc.verdict["verdict"] == "not run":  # never a pass, never a failure of the tree
            pytest.skip(f"{NOT_RUN_MARK}{read_builder.name}: write side not run: admission: "
                        f"{exc.verdict['reason']}")
        fail_rerun([f"write-side coverage: the tree's admission (context_len {context_len}, kv_capacity "
                    f"{kv_capacity}): {exc.verdict['message']}"], _builder_option(read_builder))


def judge_tree_write(read_builder: Any, case: ReadCase) -> None:
    """The write side of ``case`` on an SGLang tree's own rows: a failure is headed by the step that failed
    (a write past a row, the release's extend, its code not returning); "not run" skips."""
    verdict = read_builder.write(case.layout.context_len, case.triples())
    if verdict["verdict"] == "not run":  # never a pass, never a failure of the tree
        pytest.skip(f"{NOT_RUN_MARK}{read_builder.name}: write side not run: {verdict['reason']}")
    if verdict["verdict"] == "fails":
        fail(
            [f"write-side coverage: {verdict.get('headline') or 'the release step failed'}",
             *case.lines(), f"  {verdict['message']}"],
            check_line(read_builder.name, case.layout.context_len, case.rule.kv_capacity, case.triples()),
        )


@given(case=mixed_batches(), data=st.data())
def test_admitted_requests_fit_their_shared_row(
    case: ReadCase, data: st.DataObject, read_builder: Builder
) -> None:
    """Write side: every token a request the engine admits writes lands inside its row.

    With an SGLang tree (``--read-builder sglang==X``), everything is the
    tree's own: which requests are admitted and how long they run (its
    scheduler's limits, input check and output cap), the rows (its sizing and
    its ``ReqToTokenPool``) and the writes (its extend and decode rule);
    otherwise the harness's model of SGLang's rule and row (``context_len + 4``),
    on the read side's draws.
    """
    if hasattr(read_builder, "write"):
        judge_tree_write(read_builder, _admitted_by_the_tree(read_builder, case, data))
        return
    for req in case.batch:
        over = write_overflows(case.layout, req.encoder_len, req.decoder_len)
        if over:
            fail_rerun(
                [
                    "write-side coverage: an admitted request needs more of its row than it has",
                    *case.lines(),
                    f"  {over}",
                ]
            )
