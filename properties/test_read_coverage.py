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
from :func:`properties.read_strategies.mixed_batches` (each request admitted
alone by SGLang's rule).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given

from crossattn_sizing.core.layouts import write_overflows
from crossattn_sizing.core.read_gather import Builder, first_read_violation
from crossattn_sizing.engine.sglang.source import check_line
from crossattn_sizing.findings.results import NOT_RUN_MARK

from .failures import fail, fail_rerun
from .read_strategies import ReadCase, mixed_batches


def _builder_option(builder: object) -> list[str]:
    from crossattn_sizing.core.read_gather import BUILDERS

    if hasattr(builder, "first_problem"):  # an SGLang tree's own builder: its spec
        return ["--read-builder", builder.name]  # type: ignore[attr-defined]
    names = [name for name, b in BUILDERS.items() if b is builder]
    return ["--read-builder", names[0]] if names else []


def _problem(builder: Builder | Any, case: ReadCase) -> str | None:
    """The first bad read of ``builder`` on ``case``; a release that cannot run it is skipped as not run."""
    if not hasattr(builder, "first_problem"):
        return first_read_violation(case.layout, case.batch, builder)
    found = builder.first_problem(case.layout.context_len, _triples(case))
    if found is None:
        return None
    kind, line = found
    if kind == "not run":  # the adapter's gap: never a pass, never a failure of the release, never n/a
        pytest.skip(f"{NOT_RUN_MARK}{line}")  # the line names the release, the path and the piece
    return line


@given(case=mixed_batches())
def test_gathers_stay_in_row_and_own_columns(case: ReadCase, read_builder: Builder) -> None:
    """No admitted mixed batch makes the builder read past a row or consume a column it never wrote."""
    problem = _problem(read_builder, case)
    if problem is None:
        return
    lines = [
        "read-side coverage: a gathered column is outside the request's row",
        *case.lines(),
        f"  {problem}",
    ]
    if hasattr(read_builder, "first_problem"):  # the release's own builder: `check --engine` replays it alone
        fail(
            lines,
            check_line(read_builder.name, case.layout.context_len, case.rule.kv_capacity, _triples(case)),  # type: ignore[attr-defined]
        )
    fail_rerun(lines, _builder_option(read_builder))


def _triples(case: ReadCase) -> list[tuple[int, int, int]]:
    return [
        (r.encoder_len, r.prompt_len, b.decoder_len) for r, b in zip(case.requests, case.batch, strict=True)
    ]


@given(case=mixed_batches())
def test_admitted_requests_fit_their_shared_row(case: ReadCase, read_builder: Builder) -> None:
    """Write side on the same draws: every token an admitted request writes lands inside its row.

    With an SGLang tree (``--read-builder sglang==X``), the rows are the tree's
    own (its sizing and its ``ReqToTokenPool``) and the writes its own extend
    and decode rule; otherwise the harness's model of the row, ``context_len + 4``.
    """
    if hasattr(read_builder, "write"):
        verdict = read_builder.write(case.layout.context_len, _triples(case))
        if verdict["verdict"] == "not run":  # never a pass, never a failure of the tree
            pytest.skip(f"{read_builder.name}: write side not run: {verdict['reason']}")  # type: ignore[attr-defined]
        if verdict["verdict"] == "fails":
            fail(
                ["write-side coverage: an admitted request writes past its row (the tree's own rows)",
                 *case.lines(), f"  {verdict['message']}"],
                check_line(read_builder.name, case.layout.context_len, case.rule.kv_capacity, _triples(case)),  # type: ignore[attr-defined]
            )
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
