"""Wall-time sampling in every Python process of a benchmarked run (benchmarks/bench_engine.py).

Why here: a ``verify`` of an engine tree is several processes (the judge, the
judge's second process for half the test files, one vLLM worker per release
and side), and the workers are the harness's own code that takes no profiling
option. Python imports ``sitecustomize`` at start-up from the path, so
``PYTHONPATH=benchmarks/profile_hook`` and ``BENCH_ENGINE_SAMPLES=DIR`` make
each process (the workers inherit the environment) record where its main
thread is every :data:`INTERVAL` seconds, without changing what it runs. Each
sample is weighted by the wall time since the previous one.

Each process writes ``DIR/<pid>.json`` (rewritten every few seconds, so a
process killed at the end still leaves its figures): its command line, start
and last-seen times, and the seconds spent in each distinct stack of
``file:function`` frames, each tagged with the pytest test running at the time
(``PYTEST_CURRENT_TEST``). In a judge it also times each request to a
worker (``EngineWorker._request``: op, seconds) and each Hypothesis example
(``execute_once``: seconds, and whether the shrinker ran it), by wrapping the
two methods once their modules are imported. Nothing happens without
``BENCH_ENGINE_SAMPLES``.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import sys
import threading
import time
from typing import Any

INTERVAL = 0.01
FLUSH_EVERY = 5.0
_OUT = os.environ.get("BENCH_ENGINE_SAMPLES")


def _short(filename: str) -> str:
    """A frame's file without the machine's prefix: from site-packages or the repository on."""
    for marker in ("site-packages/", "/src/", "/lib/python3"):
        at = filename.rfind(marker)
        if at >= 0:
            return filename[at + len(marker):] if marker != "/lib/python3" else "stdlib" + filename[at + 12:]
    parts = filename.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


class _Recorder:
    def __init__(self, out: str) -> None:
        self.path = os.path.join(out, f"{os.getpid()}.json")
        self.start = time.time()
        self.stacks: collections.Counter[tuple[str, tuple[str, ...]]] = collections.Counter()  # seconds
        self.requests: list[tuple[str, str, float]] = []
        self.examples: list[tuple[str, float, bool]] = []
        self.lock = threading.Lock()
        self.main = threading.main_thread().ident
        self.patched: set[str] = set()
        self.names: dict[Any, str] = {}

    def frames(self, frame: Any) -> tuple[str, ...]:
        out = []
        while frame is not None:
            code = frame.f_code
            name = self.names.get(code)
            if name is None:
                name = self.names[code] = f"{_short(code.co_filename)}:{code.co_name}"
            out.append(name)
            frame = frame.f_back
        return tuple(reversed(out))

    def loop(self) -> None:
        last_flush = last = time.monotonic()
        while True:
            time.sleep(INTERVAL)
            frame = sys._current_frames().get(self.main)
            now = time.monotonic()
            # Each sample stands for the wall time since the one before: a sampler kept waiting (for
            # the GIL while the main thread computes, or for a core on a loaded machine) must not
            # under-count what the main thread was doing.
            took, last = min(now - last, 1.0), now
            if frame is not None:
                test = os.environ.get("PYTEST_CURRENT_TEST", "")
                with self.lock:
                    self.stacks[(test, self.frames(frame))] += took
            del frame
            try:
                self.patch()
                if time.monotonic() - last_flush > FLUSH_EVERY:
                    self.flush()
                    last_flush = time.monotonic()
            except Exception as exc:  # the sampler must outlive a hiccup (a full disk, an odd module)
                print(f"bench-engine sampler: {exc!r}", file=sys.stderr)

    def patch(self) -> None:
        """Wrap the request and example methods once their modules are loaded (judge processes)."""
        # A module is in sys.modules while it is still being executed: wait for the class itself.
        worker = getattr(sys.modules.get("crossattn_sizing.engine.client"), "EngineWorker", None)
        if worker is not None and "request" not in self.patched:
            self.patched.add("request")
            self.wrap(worker, "_request", self.requests, lambda args: args[1])
        holder = getattr(sys.modules.get("hypothesis.core"), "StateForActualGivenExecution", None)
        if holder is not None and "example" not in self.patched:
            self.patched.add("example")
            self.wrap(holder, "execute_once", self.examples, None)

    def wrap(self, cls: type, name: str, into: list[Any], label: Any) -> None:
        original = getattr(cls, name, None)
        if original is None:
            return
        recorder = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                took = time.perf_counter() - began
                test = os.environ.get("PYTEST_CURRENT_TEST", "")
                if label is None:
                    frame, shrinking = sys._getframe(1), False
                    while frame is not None and not shrinking:
                        shrinking = "shrinker" in frame.f_code.co_filename
                        frame = frame.f_back
                    entry: tuple[Any, ...] = (test, took, shrinking)
                else:
                    entry = (test, label(args), took)
                with recorder.lock:
                    into.append(entry)

        setattr(cls, name, timed)

    def flush(self) -> None:
        with self.lock:
            data = {
                "pid": os.getpid(),
                "ppid": os.getppid(),
                "argv": sys.argv,
                "start": self.start,
                "end": time.time(),
                "interval": INTERVAL,  # the stacks' counts are seconds, not samples
                "stacks": [[test, list(stack), n] for (test, stack), n in self.stacks.items()],
                "requests": self.requests,
                "examples": self.examples,
            }
        tmp = f"{self.path}.{threading.get_ident()}.tmp"  # the sampler and atexit may both flush
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.path)


if _OUT:
    _recorder = _Recorder(_OUT)
    threading.Thread(target=_recorder.loop, daemon=True, name="bench-engine-sampler").start()
    atexit.register(_recorder.flush)
