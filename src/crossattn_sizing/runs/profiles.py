"""Hypothesis settings profiles and the example database the harness uses.

``dev`` is the default at a desk, ``ci`` is derandomized with no database and
prints the reproduce blob, ``nightly`` samples many examples and keeps a
database, ``gpu`` drops the deadline (kernel compilation and first launches
are slow and not what we measure). Selected with ``--hypothesis-profile`` or
the ``CROSSATTN_PROFILE`` environment variable.

The database is a local directory (``CROSSATTN_DB``, default
``.hypothesis/examples``); a read-only shared copy named by
``CROSSATTN_SHARED_DB`` is layered under it, so developers replay what the
nightly fleet found without writing into the shared copy. A fuzzing fleet
shares one live database instead: ``CROSSATTN_REDIS_URL`` names a Redis server
(:mod:`crossattn_sizing.fleet.database`) layered under the local directory, so
every example found by any worker is saved to both and replayed by all.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)

from crossattn_sizing.base import settings as env

DEFAULT_DB = Path(".hypothesis") / "examples"


def example_database(directory: Path | None = None, url: str | None = None) -> ExampleDatabase:
    """The local directory database, with the fleet's Redis and the shared read-only copy beneath it.

    ``directory`` and ``url`` are what a command's options name (``fuzz --db``, ``--redis-url``),
    passed here rather than through the environment; not given, the user's variables decide.
    """
    from crossattn_sizing.fleet.database import redis_database, redis_url

    local = directory or env.database_dir(DEFAULT_DB)
    layers: list[ExampleDatabase] = [DirectoryBasedExampleDatabase(str(local))]
    url = url or redis_url()
    if url:
        layers.append(redis_database(url))
    shared = env.shared_database_dir()
    if shared is not None:
        layers.append(ReadOnlyDatabase(DirectoryBasedExampleDatabase(str(shared))))
    return layers[0] if len(layers) == 1 else MultiplexedDatabase(*layers)


def register_profiles() -> None:
    """Register the four profiles with Hypothesis (idempotent)."""
    # Strategies here filter little, but DCP-valid interleaves and divisors can
    # make some draws slow on a loaded 2-core box: too_slow is not a defect.
    quiet = [HealthCheck.too_slow]
    settings.register_profile(
        "dev", max_examples=100, deadline=None, suppress_health_check=quiet, database=example_database()
    )
    settings.register_profile(
        "ci",
        max_examples=200,
        derandomize=True,
        database=None,
        print_blob=True,
        deadline=None,  # CI machines are noisy; speed is measured by benchmarks, not deadlines
        suppress_health_check=quiet,
    )
    settings.register_profile(
        "nightly",
        max_examples=5000,
        deadline=None,
        database=example_database(),
        print_blob=True,
        suppress_health_check=quiet,
    )
    settings.register_profile(
        "gpu", max_examples=200, deadline=None, print_blob=True, suppress_health_check=quiet,
        database=example_database(),
    )


    # Only the pinned examples (hand-pinned shapes and regression files), no generation:
    # the quick check that what the fuzzer found still fails (or is fixed).
    settings.register_profile("replay", phases=[Phase.explicit], database=None, print_blob=True)
    # Pinned examples and what the example database holds (a fleet's Redis included), no
    # generation: a failure here was found earlier, by this machine or by any fleet worker.
    settings.register_profile(
        "reuse", phases=[Phase.explicit, Phase.reuse], database=example_database(), print_blob=True,
        deadline=None, suppress_health_check=quiet,
    )


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


def selected_profile(explicit: str | None = None) -> str:
    """The profile to load: an explicit choice, else the environment, else ``dev``."""
    if explicit is None:
        return env.profile()
    if explicit not in env.PROFILES:
        from crossattn_sizing.base.errors import HarnessError, shown

        known = ", ".join(env.PROFILES)
        raise HarnessError(f"unknown Hypothesis profile {shown(explicit)}: use one of {known}")
    return explicit
