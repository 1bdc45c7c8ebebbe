"""How many threads torch's CPU operations use when several of the harness's processes share the cores.

Why: torch starts one OpenMP thread per core in every process, and an
OpenMP thread that waits spins on its core before it sleeps. When verify
splits a run between two judge processes on two cores, four threads then
compete for two cores, and each spin-wait takes a core from a process that
has work. Measured on 2 idle cores, ``verify`` over the seven built-in
policies took 87 s and 160 CPU s with the default threads, and 40 s and
68 CPU s with one thread per judge process (``--jobs 1``: 65 s and 81 CPU s).
The cores are therefore split between the processes that run at once. A
number the user set in ``OMP_NUM_THREADS`` stands: every process gets it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

THREADS_VARIABLE = "OMP_NUM_THREADS"


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the platform has one), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def user_set_threads(env: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Whether ``env`` names a number of threads (:data:`THREADS_VARIABLE`, not empty): it then stands."""
    return bool(env.get(THREADS_VARIABLE))


def one_thread_unless_set(env: dict[str, str]) -> None:
    """A child's environment ``env`` gets one thread unless it names a number: for a worker the judge
    waits on (a user's code, an engine release, a DCP rank), whose small kernels gain nothing from
    threads and whose spin-waits take a core from the process that has work."""
    if not user_set_threads(env):
        env[THREADS_VARIABLE] = "1"


def threads_each(processes: int) -> int | None:
    """Threads for each of ``processes`` running at once: the usable cores split between them, at
    least one each; None where the user set :data:`THREADS_VARIABLE` (their number stands)."""
    if user_set_threads():
        return None
    return max(1, usable_cores() // max(1, processes))


def child_environment(processes: int) -> dict[str, str]:
    """This process's environment for a child that is one of ``processes`` running at once."""
    env = dict(os.environ)
    threads = threads_each(processes)
    if threads is not None:
        env[THREADS_VARIABLE] = str(threads)
    return env


@contextlib.contextmanager
def sharing_cores(processes: int) -> Iterator[None]:
    """While the block runs, this process's torch uses its share of the cores (:func:`threads_each`);
    the number it had is restored after."""
    threads = threads_each(processes)
    if threads is None or processes <= 1:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
