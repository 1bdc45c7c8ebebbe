"""The fleet's database layering and the worker command line, without a server."""

from __future__ import annotations

import pytest
from hypothesis.database import InMemoryExampleDatabase, MultiplexedDatabase
from hypothesis.extra.redis import RedisExampleDatabase

from crossattn_sizing.base.errors import HarnessError
from crossattn_sizing.base.settings import DB, REDIS_URL
from crossattn_sizing.commands.cli import build_parser
from crossattn_sizing.fleet.database import ScopedDatabase
from crossattn_sizing.runs import profiles
from crossattn_sizing.runs.fuzz_workers import forward_argv


def test_scoped_databases_keep_policies_apart() -> None:
    inner = InMemoryExampleDatabase()
    broken, fixed = ScopedDatabase(inner, "mrv2-prefix|torch"), ScopedDatabase(inner, "mrv2|torch")
    broken.save(b"test", b"failing case")
    assert list(fixed.fetch(b"test")) == []
    fixed.delete(b"test", b"failing case")  # what Hypothesis does when a stored case passes
    assert list(broken.fetch(b"test")) == [b"failing case"]
    broken.move(b"test", b"secondary", b"failing case")
    assert list(broken.fetch(b"secondary")) == [b"failing case"] and list(broken.fetch(b"test")) == []


def test_the_redis_database_is_layered_under_the_local_one(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(DB, str(tmp_path / "db"))
    monkeypatch.setenv(REDIS_URL, "redis://127.0.0.1:1/0")  # never connected to here
    db = profiles.example_database()
    assert isinstance(db, MultiplexedDatabase)
    assert any(isinstance(layer, RedisExampleDatabase) for layer in db._wrapped)
    monkeypatch.setenv(REDIS_URL, "http://example.invalid")
    with pytest.raises(HarnessError, match=r"CROSSATTN_REDIS_URL=.*not a Redis URL"):
        profiles.example_database()


def test_workers_get_the_parents_options_without_workers_and_json() -> None:
    parser = build_parser()
    argv = ["fuzz", "--jobs", "3", "--policy", "mrv2", "--policy", "mrv2-prefix", "-k", "test_capacity",
            "--minutes", "2.5", "--json", "out.json", "--redis-url", "unix:///tmp/r.sock"]
    args = parser.parse_args(argv)
    forwarded = forward_argv(args.parser, args, drop={"jobs", "json"})
    again = parser.parse_args(["fuzz", *forwarded])
    for name in ("policy", "select", "minutes", "redis_url", "impl", "examples_per_round", "db"):
        assert getattr(again, name) == getattr(args, name), name
    assert again.jobs == 1 and again.json is None
