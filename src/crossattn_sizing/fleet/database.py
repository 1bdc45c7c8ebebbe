"""The shared example database of a fuzzing fleet: Hypothesis's ``RedisExampleDatabase``.

Every fuzzing process (on one machine with ``fuzz --jobs N``, or on many)
points ``CROSSATTN_REDIS_URL`` at one server. Hypothesis saves each failing
example (and each smaller one while shrinking) to the database as soon as it
is found, so a worker killed mid-run loses nothing it had found, and every
other worker, and any plain ``pytest`` run pointed at the same URL, replays it
in its reuse phase. :func:`crossattn_sizing.runs.profiles.example_database` layers
this under the local directory database: writes go to both, reads see both.
"""

from __future__ import annotations

from hypothesis.database import ExampleDatabase

from crossattn_sizing.base import settings
from crossattn_sizing.base.errors import HarnessError

KEY_PREFIX = b"crossattn-sizing:"
"""Keys of this harness in a shared server, apart from other projects' Hypothesis databases."""


def redis_url() -> str | None:
    """The fleet's database URL (``redis://host:port/db`` or ``unix:///path.sock``), if set."""
    return settings.redis_url()


def _client(url: str):
    """A redis-py client for ``url``; no connection is made yet."""
    try:
        import redis
    except ImportError:
        raise HarnessError(
            f"{settings.REDIS_URL}={url!r}: the redis package is not installed "
            "(pip install 'crossattn-sizing[fleet]')"
        ) from None
    try:
        return redis.Redis.from_url(url, socket_connect_timeout=10, socket_timeout=60)
    except ValueError as exc:
        raise HarnessError(
            f"{settings.REDIS_URL}={url!r}: not a Redis URL ({exc}); use redis://HOST:PORT/DB or unix:///PATH"
        ) from None


def redis_database(url: str) -> ExampleDatabase:
    """Hypothesis's Redis database on ``url`` under this harness's key prefix (connects lazily)."""
    from hypothesis.extra.redis import RedisExampleDatabase

    return RedisExampleDatabase(_client(url), key_prefix=KEY_PREFIX)


def check_reachable(url: str) -> None:
    """Ping the server once, so an unreachable fleet database is one clear error before any work.

    Without this a fuzzing worker would fail inside Hypothesis on its first
    database read, with a redis-py traceback.
    """
    import redis

    client = _client(url)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise HarnessError(f"{settings.REDIS_URL}={url!r}: cannot reach the Redis server ({exc})") from None
    finally:
        client.close()


def stored_failures(url: str) -> int:
    """How many tests have failing examples stored on the server (tests and summaries).

    Hypothesis keeps a test's failing examples under its database key, and
    other examples under sub-keys of it (``.secondary``: failures it shrank
    past; ``.pareto``: the best ``target()`` scores), which do not count.
    """
    client = _client(url)
    try:
        keys = client.scan_iter(match=KEY_PREFIX + b"*")
        return sum(1 for key in keys if not key.endswith((b".secondary", b".pareto")))
    finally:
        client.close()


class ScopedDatabase(ExampleDatabase):
    """Another database's view with every key prefixed by a scope (the policy and implementation).

    Hypothesis keys examples by the test function only, and deletes a stored
    example from a key when replaying it no longer fails. The sizing policy and
    the implementation are pytest options, not part of that key, so without a
    scope a fleet fuzzing ``mrv2`` would delete, on its next round, every case
    another worker had found failing under ``mrv2-prefix``: a finding lost.
    Scoped, each (policy, implementation) keeps its own examples, and a plain
    ``pytest --policy P`` replays what the fleet found for ``P``.
    """

    def __init__(self, inner: ExampleDatabase, scope: str) -> None:
        super().__init__()
        self.inner = inner
        self.scope = scope
        self._prefix = scope.encode() + b"\x00"

    def __repr__(self) -> str:
        return f"ScopedDatabase({self.inner!r}, {self.scope!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ScopedDatabase) and (self.inner, self.scope) == (other.inner, other.scope)

    def __hash__(self) -> int:
        return hash((type(self), self.scope))

    def save(self, key: bytes, value: bytes) -> None:
        """Save under this scope's prefix."""
        self.inner.save(self._prefix + key, value)

    def fetch(self, key: bytes):
        """Fetch from this scope only."""
        return self.inner.fetch(self._prefix + key)

    def delete(self, key: bytes, value: bytes) -> None:
        """Delete from this scope only."""
        self.inner.delete(self._prefix + key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        """Move within this scope."""
        self.inner.move(self._prefix + src, self._prefix + dest, value)


def scope_current_profile(scope: str) -> None:
    """Load the current Hypothesis profile again with its database scoped to ``scope``.

    Called by the pytest plugin once the profile and the policy are known; a
    profile without a database (``ci``, ``replay``) is left as it is.
    """
    from hypothesis import settings

    base = (settings._current_profile or "default").split("[", 1)[0]
    current = settings.get_profile(base)
    if current.database is None:
        return
    name = f"{base}[{scope}]"
    settings.register_profile(name, current, database=ScopedDatabase(current.database, scope))
    settings.load_profile(name)
