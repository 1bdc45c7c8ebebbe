"""Fingerprints of every tensor the implementations produce under the property suite, to compare trees.

A refactor must leave the implementations' outputs equal bit for bit. This
runs the implementation properties (slot mapping, attention) under the ci
profile (derandomized: the same examples on every tree whose strategies are
the same) with the torch and Triton implementations, and records a SHA-256 of
the raw bytes of each result in call order: the slot mapping written, the KV
caches after each write, attention's output and LSE, each merge.

The examples come from a fixed seed, not from the ci profile's derandomizing
(which seeds each test from a digest of its source, so an edited test body
would draw other examples and hide or fake a difference).

    python benchmarks/behaviour_snapshot.py --out new.json
    python benchmarks/behaviour_snapshot.py --compare old.json new.json

To fingerprint another tree (an older commit in a worktree), run the script
from this tree with that tree first on the path:
``PYTHONPATH=OLD/src:OLD python benchmarks/behaviour_snapshot.py --root OLD --out old.json``.
Prints the number of results per implementation and method, and with
``--compare`` the first call that differs, if any (exit 1).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import inspect
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

TESTS = ("properties/test_slot_mapping.py", "properties/test_attention.py")
IMPLS = ("torch", "triton")
METHODS = ("slot_mapping", "write_kv", "paged_attention", "merge")


def fingerprint(value: Any) -> str:
    """SHA-256 of a tensor's dtype, shape and raw bytes (tuples and lists: of each item in turn)."""
    import torch

    digest = hashlib.sha256()
    for t in value if isinstance(value, (tuple, list)) else (value,):
        flat = t.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return digest.hexdigest()[:16]


def _recorded(cls: type, method: str, calls: list[list[str]]) -> Callable[..., Any]:
    original = inspect.getattr_static(cls, method)  # a function or a staticmethod: bound below either way

    def wrapper(self: Any, **kw: Any) -> Any:
        result = original.__get__(self, cls)(**kw)
        if method == "slot_mapping":
            seen = kw["out"]
        elif method == "write_kv":
            seen = (kw["key_cache"], kw["value_cache"])
        else:
            seen = result
        calls.append([method, fingerprint(seen)])
        return result

    return wrapper


@contextlib.contextmanager
def recording(calls: list[list[str]]) -> Iterator[None]:
    """Every method of the torch and Triton implementations records its result's fingerprint."""
    from crossattn_sizing import impl

    saved = []
    for cls in (impl.TorchImpl, impl.TritonImpl):
        for method in METHODS:
            saved.append((cls, method, cls.__dict__.get(method)))
            setattr(cls, method, _recorded(cls, method, calls))
    try:
        yield
    finally:
        for cls, method, original in saved:
            if original is None:
                delattr(cls, method)
            else:
                setattr(cls, method, original)


class FixedSeed:
    """The ci profile with derandomizing off once every plugin has loaded its profile; the seed is
    ``--hypothesis-seed``'s."""

    def pytest_sessionstart(self, session: Any) -> None:
        from hypothesis import settings

        settings.register_profile("snapshot", settings.get_profile("ci"), derandomize=False, database=None)
        settings.load_profile("snapshot")


def snapshot(root: Path) -> dict[str, list[list[str]]]:
    """``{impl: [[method, fingerprint], ...]}`` from the property suite run in ``root``."""
    import pytest

    os.chdir(root)
    out: dict[str, list[list[str]]] = {}
    for name in IMPLS:
        calls: list[list[str]] = []
        with recording(calls):
            args = [*TESTS, "-q", "-p", "no:cacheprovider", "--impl", name, "--hypothesis-seed", "20261204"]
            code = pytest.main(args, plugins=[FixedSeed()])
        if code != 0:
            raise SystemExit(f"the property suite did not pass with --impl {name} (pytest exit {code})")
        out[name] = calls
    return out


def compare(old: dict[str, list[list[str]]], new: dict[str, list[list[str]]]) -> int:
    status = 0
    for name in IMPLS:
        a, b = old.get(name, []), new.get(name, [])
        first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        if first is None and len(a) == len(b):
            print(f"{name}: {len(a)} results, equal bit for bit")
            continue
        status = 1
        where = first if first is not None else min(len(a), len(b))
        print(f"{name}: differ at result {where} ({len(a)} old, {len(b)} new): "
              f"old {a[where] if where < len(a) else '-'}, new {b[where] if where < len(b) else '-'}")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    args = parser.parse_args(argv)
    if args.compare:
        old, new = (json.loads(p.read_text()) for p in args.compare)
        return compare(old, new)
    if args.out is None:
        parser.error("--out FILE (or --compare OLD NEW)")
    out_path = args.out.resolve()
    result = snapshot(args.root.resolve())
    out_path.write_text(json.dumps(result))
    for name, calls in result.items():
        counts = {m: sum(1 for c in calls if c[0] == m) for m in METHODS}
        print(f"{name}: {counts}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
