"""SGLang's start-up batches, through the release's own code: every dummy request fits its row and the kernel
reads only its own columns.

Before any request arrives, SGLang captures one CUDA graph per capture size on
a dummy decode batch its runner lays out (every request at row 0, the
backend's ``seq_len`` fill and, from 0.5.13, ``max_source_positions`` encoder
tokens). The release's own runner statements, FA3 capture buffers, capture
and replay entry and ``forward_decode`` build what the kernel is handed
(:mod:`crossattn_sizing.engine.sglang.startup`); each path must hold for
every server :func:`properties.sglang_startup_strategies.startup_servers` draws:
every length fits the dummy request's row and the kernel's page table, every
column read is inside the row and is the request's own.

Not a ``test_`` module: it takes an SGLang tree (``--read-builder sglang==X``
or ``sglang@PATH``), which ``verify --engine sglang...`` and the tests hand it.
A server the harness cannot run on the release (its range has no start-up
steps, a piece its adapter lacks) is skipped with the reason: never a pass,
never a failure.
"""

from __future__ import annotations

from typing import Any, Protocol

import pytest
from hypothesis import given, settings

from crossattn_sizing.core.startup_server import StartupServer
from crossattn_sizing.core.startup_server import server_check_line as check_line
from crossattn_sizing.findings.results import NOT_RUN_MARK

from .failures import fail_rerun
from .sglang_startup_strategies import startup_servers


class SglangStartup(Protocol):
    """The start-up judge the engine fixture gives (``read_builder.startup()``): an SGLang tree's own runner
    fill and FA3 capture code in its worker. Declared here, as what the property needs of it: the family
    that implements it is reached only through the engine registry."""

    @property
    def name(self) -> str:
        """How reports name the tree: its spec."""
        ...

    def verdicts(self, server: StartupServer) -> dict[str, dict[str, Any]]:
        """``path -> verdict`` (``holds``, ``fails`` with ``where``, ``not run`` with the reason)."""
        ...


NEEDS_TREE = ("properties/sglang_startup.py runs an SGLang tree's own capture code: give --read-builder "
              "sglang==X or sglang@PATH")
"""The usage error (properties/conftest.py) of a run that collects this property without a tree."""


@pytest.fixture(scope="session")
def sglang_startup(read_builder: Any) -> SglangStartup:
    """The start-up judge of the tree ``--read-builder`` names (the engine fixture's ``startup()``: its
    worker started, ``--call-timeout`` on each call)."""
    if not hasattr(read_builder, "startup"):  # refused at collection (properties/conftest.py)
        pytest.exit(NEEDS_TREE, returncode=pytest.ExitCode.USAGE_ERROR)
    return read_builder.startup()


def check_startup(server: StartupServer, judge: SglangStartup, path: str) -> None:
    """The property's body, shared with the meta-tests: the tree's dummy batches of ``server`` on ``path``
    (``capture`` or ``replay``), its verdict turned into a pass, a failure or a skip (not run)."""
    verdict = judge.verdicts(server)[path]
    if verdict["verdict"] == "not run":  # the adapter's gap: never a pass, never a failure of the release
        pytest.skip(f"{NOT_RUN_MARK}{judge.name}: start-up {path}: {verdict['reason']}")
    if verdict["verdict"] == "fails":
        where = f" ({verdict['where']})" if verdict.get("where") else ""
        heading = f"SGLang start-up batches ({judge.name}, CUDA-graph {path})"
        fail_rerun([f"{heading}: {verdict.get('headline')}{where}",
                    *server.lines(), f"  {verdict['message']}",
                    f"  replay: {check_line(judge.name, server)}"],
                   ["--read-builder", judge.name])


# Half the profile's examples: each runs the release's capture and replay code, the decode-metadata kernel
# in Triton's interpreter (about a second an example on a loaded CPU; a dummy past its row is judged before
# any of it runs).
assert settings.default is not None  # the plugin loaded a profile
SHARE = settings(max_examples=max(1, settings.default.max_examples // 2))


@SHARE
@given(server=startup_servers())
def test_capture_batches_fit_their_rows(server: StartupServer, sglang_startup: SglangStartup) -> None:
    """Every capture size's dummy batch, as the release builds and captures it, hands the kernel only
    lengths and columns inside its own row."""
    check_startup(server, sglang_startup, "capture")


@SHARE
@given(server=startup_servers())
def test_padded_replay_fits_its_rows(server: StartupServer, sglang_startup: SglangStartup) -> None:
    """The same dummy batch replayed (what a padded slot of a smaller batch replays) hands the kernel only
    lengths and columns inside its own row."""
    check_startup(server, sglang_startup, "replay")
