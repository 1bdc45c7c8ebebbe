"""Hypothesis settings profiles and the example database the harness uses.

``dev`` is the default at a desk, ``ci`` is derandomized with no database and
prints the reproduce blob, ``nightly`` samples many examples and keeps a
database, ``gpu`` is ``ci``'s budget with a database, ``replay`` runs only the
pinned examples and ``reuse`` those and what the database holds. None has a
deadline: a slow example is never a failing one. Selected with
``--hypothesis-profile``, else the ``CROSSATTN_PROFILE`` environment variable,
else the command's default (``docs/settings.md``).

The database is a local directory (``CROSSATTN_DB``, default ``examples/`` in
Hypothesis's storage folder, :func:`crossattn_sizing.base.settings.hypothesis_home`:
the harness's cache, never the working folder); a read-only shared copy named by
``CROSSATTN_SHARED_DB`` is layered under it, so developers replay what the
nightly fleet found without writing into the shared copy. A fuzzing fleet
shares one live database instead: ``CROSSATTN_REDIS_URL`` names a Redis server
(:mod:`crossattn_sizing.fleet.database`) layered under the local directory, so
every example found by any worker is saved to both and replayed by all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)

from crossattn_sizing.base import settings as env

DEFAULT_DB_SHOWN = "examples/ in Hypothesis's storage (~/.cache/crossattn-sizing/hypothesis)"
"""The default database folder as ``--help`` says it (the folder itself is read when a run starts)."""


def default_database_dir() -> Path:
    """The example database where ``CROSSATTN_DB`` does not name one: beside Hypothesis's other files."""
    return env.hypothesis_home() / "examples"


def place_hypothesis_storage() -> None:
    """Point Hypothesis's own files (its constants cache, Unicode tables, its default database) at
    :func:`~crossattn_sizing.base.settings.hypothesis_home`, before any test draws.

    Hypothesis writes them under ``.hypothesis`` in the working folder unless told otherwise: a
    ``verify`` run in a contributor's engine checkout left ``.hypothesis/constants`` there, untracked.
    """
    from hypothesis.configuration import set_hypothesis_home_dir

    set_hypothesis_home_dir(env.hypothesis_home())


def example_database(directory: Path | None = None, url: str | None = None) -> ExampleDatabase:
    """The local directory database, with the fleet's Redis and the shared read-only copy beneath it.

    ``directory`` and ``url`` are what a command's options name (``fuzz --db``, ``--redis-url``),
    passed here rather than through the environment; not given, the user's variables decide.
    """
    from crossattn_sizing.fleet.database import redis_database, redis_url

    local = directory or env.database_dir(default_database_dir())
    layers: list[ExampleDatabase] = [DirectoryBasedExampleDatabase(str(local))]
    url = url or redis_url()
    if url:
        layers.append(redis_database(url))
    shared = env.shared_database_dir()
    if shared is not None:
        layers.append(ReadOnlyDatabase(DirectoryBasedExampleDatabase(str(shared))))
    return layers[0] if len(layers) == 1 else MultiplexedDatabase(*layers)


def database_folder(profile: str) -> Path | None:
    """The folder where ``profile`` saves its examples (its local layer), or None for a profile that keeps
    none (``ci``, ``replay``): what ``verify`` reports, read off the registered profile itself."""
    register_profiles()
    database = settings.get_profile(profile).database
    while isinstance(database, MultiplexedDatabase):  # example_database() puts the local folder first
        database = database._wrapped[0]
    return database.path if isinstance(database, DirectoryBasedExampleDatabase) else None


SEARCHING = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)
"""The phases of a profile that searches: all of Hypothesis's but ``explain`` (:func:`register_profiles`)."""


def register_profiles() -> None:
    """Register the six profiles with Hypothesis (idempotent), none with a deadline, and place its storage
    (:func:`place_hypothesis_storage`): every harness run registers them before anything is drawn.

    A slow example is not a failing one: Hypothesis's default deadline (200 ms per example) turns a
    loaded machine, a first kernel compilation or a transformers model's first forward into "fails"
    (DeadlineExceeded, exit 1). How long a call into user code may take is bounded where it runs, by
    its worker's ``--call-timeout``; speed is measured by the benchmarks. Profiles derived from these
    (``--max-examples``, fuzz rounds, the engine budget, a scoped database) inherit ``deadline=None``.

    None runs Hypothesis's explain phase (:data:`SEARCHING`): after a failure is shrunk, it reruns the
    failing example many times over with parts varied, to comment which parts did not matter. With an
    implementation or an engine tree under test each rerun is a round trip to its worker (an attention
    example: caches written, attended, compared), so a failing example took minutes to report; the
    harness's report is its own diagnosis and reproduce line, which never read those comments.
    """
    # Strategies here filter little, but DCP-valid interleaves and divisors can
    # make some draws slow on a loaded 2-core box: too_slow is not a defect.
    place_hypothesis_storage()
    quiet = [HealthCheck.too_slow]
    common: dict[str, Any] = {"deadline": None, "suppress_health_check": quiet, "phases": SEARCHING}
    blob = {**common, "print_blob": True}  # the failure's @reproduce_failure line
    settings.register_profile("dev", max_examples=100, database=example_database(), **common)
    settings.register_profile("ci", max_examples=200, derandomize=True, database=None, **blob)
    settings.register_profile("nightly", max_examples=5000, database=example_database(), **blob)
    settings.register_profile("gpu", max_examples=200, database=example_database(), **blob)
    # Only the pinned examples (hand-pinned shapes and regression files), no generation:
    # the quick check that what the fuzzer found still fails (or is fixed).
    settings.register_profile("replay", **{**blob, "phases": [Phase.explicit]}, database=None)
    # Pinned examples and what the example database holds (a fleet's Redis included), no
    # generation: a failure here was found earlier, by this machine or by any fleet worker.
    settings.register_profile("reuse", **{**blob, "phases": [Phase.explicit, Phase.reuse]},
                              database=example_database())  # fmt: skip


def with_max_examples(name: str, max_examples: int | None) -> str:
    """The profile to run: ``name``, or a child of it with the example budget changed (``--max-examples``).

    Here, not in ``verify``, because verify's worker process (:mod:`crossattn_sizing.runs.share_process`)
    builds the same child profile from the request it is sent.
    """
    if max_examples is None:
        return name
    if max_examples < 1:
        from crossattn_sizing.base.errors import OptionError

        raise OptionError("--max-examples", max_examples, "must be >= 1")
    register_profiles()
    child = f"{name}-x{max_examples}"
    settings.register_profile(child, settings.get_profile(name), max_examples=max_examples)
    return child


def selected_profile(explicit: str | None = None, default: str = "dev") -> str:
    """The profile to load: ``--hypothesis-profile``, else ``CROSSATTN_PROFILE``, else the command's
    ``default`` (the one precedence rule of every setting, docs/settings.md)."""
    if explicit is None:
        return env.profile(default)
    if explicit not in env.PROFILES:
        from crossattn_sizing.base.errors import HarnessError, shown

        known = ", ".join(env.PROFILES)
        raise HarnessError(f"unknown Hypothesis profile {shown(explicit)}: use one of {known}")
    return explicit
