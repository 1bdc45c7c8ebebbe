"""``crossattn-sizing audit``: check the block-table sizing of real vLLM releases.

Each ``--engine vllm==X`` is downloaded once as a wheel (pip, no dependencies)
into a cache; each ``--engine vllm@PATH`` is read in place. ModelRunner V2 of a
release, or of a tree (a folder holding ``vllm/``), is executed (its own
``initialize_kv_cache``, in a worker process, see :mod:`crossattn_sizing.engine`)
where it runs on this machine; everything else, V2 where it cannot run, and an
installed ``vllm`` package directory named by ``vllm@PATH`` itself, is read from
the source (see :mod:`crossattn_sizing.audit`). Each verdict says which path it took.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from crossattn_sizing.audit.executed import AUDITED
from crossattn_sizing.audit.extract import RUNNERS
from crossattn_sizing.audit.verdicts import audit_tree, sweep_configs
from crossattn_sizing.base import settings
from crossattn_sizing.base.errors import HarnessError, OptionError, ReleaseUnavailable, refuse_spelling, shown
from crossattn_sizing.commands import options
from crossattn_sizing.commands.audit_markdown import render_markdown
from crossattn_sizing.commands.audit_report import exit_status, render, to_json
from crossattn_sizing.commands.engines import Engine
from crossattn_sizing.engine.registry import engine_name, family_of, is_engine
from crossattn_sizing.engine.specs import TREE_PREFIX, tree_root
from crossattn_sizing.releases.sources import (
    SourceTree,
    cached_wheel,
    default_cache_dir,
    open_dir,
    open_release,
    provenance,
)
from crossattn_sizing.runs.outputs import ReportFiles
from crossattn_sizing.specs.resolve import check_engine_spec

OFFLINE = options.Option(
    "--offline", "never download: use only wheels already in the cache; --no-offline: download what is "
    "missing", switch=True, variable=settings.OFFLINE,
)  # fmt: skip

ACCEPTED = (
    "audit takes vllm==X (a release, e.g. vllm==0.24.0) or vllm@PATH (a folder holding vllm/, "
    "or an installed vllm package directory)"
)

EPILOG = """\
exit status:
  0  every runner a release has was read and its sizing holds (a runner the
     release does not have, e.g. V1 from 0.34.0, is reported as absent)
  1  some runner fails (a counterexample config is printed)
  2  usage or user error: unknown version, download failure, a wheel not in the
     cache when offline (--offline or CROSSATTN_OFFLINE=1), bad path, an output
     (standard output included) that cannot be written
  3  nothing fails, but some runner could not be read (the reason and the line
     it concerns are printed), or a release has none of the runners asked for
  130  interrupted (Ctrl-C)
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``audit``: its options and its help."""
    parser = subparsers.add_parser(
        "audit",
        help="read the block-table sizing out of vLLM releases and check it",
        description="Check the cross-attention block-table sizing of vLLM releases (coverage and "
        "allocation fit): ModelRunner V2 executed where the release runs here (--read-only: never), "
        "everything else read from the source (wheel or directory). Each verdict names its path.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    options.ENGINE.add(parser, repeatable=True)  # audit: vllm==X or vllm@PATH, see _checked
    refuse_spelling(parser.add_argument, "--vllm", "--engine vllm==X")
    refuse_spelling(parser.add_argument, "--vllm-path", "--engine vllm@PATH")
    parser.add_argument("--runner", action="append", choices=[*sorted(RUNNERS), "startup"], default=None,
                        help="audit only this runner (repeatable; default: all); startup: the release's own "
                        "start-up batches, V2 executed, V1 not run")  # fmt: skip
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help=f"wheel cache (default: {default_cache_dir()})")  # fmt: skip
    OFFLINE.add(parser, default=False, shown_default="no")
    options.JSON.add(parser)
    options.MARKDOWN.add(parser)  # its first line: the command that regenerates it
    parser.add_argument("--read-only", action="store_true",
                        help="never execute a release's code: read every runner from the source")  # fmt: skip
    parser.set_defaults(func=run)


def _checked(spec: str) -> str:
    """One ``--engine`` value checked without obtaining it: ``vllm==X`` (normalised) or ``vllm@PATH``.

    A bare version, ``vllm`` or an SGLang spec is one line naming the two forms audit takes.
    """
    spec = spec.strip()
    if spec.startswith("vllm=="):
        return check_engine_spec("--engine", spec)
    if spec.startswith(TREE_PREFIX):
        if _package_dir(spec) is None:  # a folder holding vllm/: checked as every command checks it
            try:
                check_engine_spec("--engine", spec)
            except ReleaseUnavailable as exc:
                also = "audit also takes an installed vllm package directory"
                raise ReleaseUnavailable(f"{exc}; {also}") from None
        return spec
    hint = f"; for release {spec}: --engine vllm=={spec}" if spec[:1].isdigit() else ""
    raise OptionError("--engine", shown(spec), ACCEPTED + hint)


def _package_dir(spec: str) -> str | None:
    """The PATH of ``vllm@PATH`` where it is an installed ``vllm`` package directory itself (it holds ``v1/``,
    not ``vllm/v1/``): read in place as ``open_dir`` reads it, never executed. None for anything else."""
    path = spec.strip().removeprefix(TREE_PREFIX)
    given = Path(path).expanduser()
    if path and not (given / "vllm" / "v1").is_dir() and (given / "v1").is_dir():
        return path
    return None


def _sources(args: argparse.Namespace) -> list[SourceTree]:
    """Every tree to audit, obtained before any is audited (each spec checked first: a bad one fails fast)."""
    if not args.engine:
        raise HarnessError("audit: give at least one --engine vllm==X or --engine vllm@PATH")
    specs = [_checked(spec) for spec in args.engine]
    trees: list[SourceTree] = []
    cache = args.cache_dir
    args.executable = {}  # tree label -> the engine spec that runs its V2 sizing
    for spec in specs:
        if spec.startswith(TREE_PREFIX):  # a tree, read in place
            package = _package_dir(spec)
            if package is not None:  # an installed package directory: read only
                trees.append(open_dir(package))
                continue
            tree = open_dir(tree_root(spec))  # a folder holding vllm/: read, and its V2 sizing executed
            args.executable[tree.label] = spec
            trees.append(tree)
            continue
        version = spec.removeprefix("vllm==")
        args.executable[version] = spec
        if cached_wheel(version, cache or default_cache_dir()) is None and not args.offline:
            print(f"crossattn-sizing: downloading the vllm {version} wheel (once, into the cache)",
                  file=sys.stderr)  # fmt: skip
        trees.append(open_release(version, cache, offline=args.offline, offline_by=args.offline_by))
    return trees


def _command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run (for the Markdown report's first line)."""
    words = ["crossattn-sizing", "audit"]
    words += [w for spec in args.engine or [] for w in ("--engine", spec)]
    words += [w for r in args.runner or [] for w in ("--runner", r)]
    words += ["--offline"] if args.offline and getattr(args, "offline_by", "--offline") == "--offline" else []
    words += ["--read-only"] if args.read_only else []
    words += ["--json", args.json] if args.json else []
    words += ["--markdown", args.markdown]
    return shlex.join(words)


def _executed(tree: SourceTree, args: argparse.Namespace, runners: list[str]) -> dict:
    """ModelRunner V2 (and 0.34's CPU runner) executed by the engine adapter where it can run the release,
    else why not."""
    spec = getattr(args, "executable", {}).get(tree.label)
    if args.read_only or not {"v2", "cpu"} & set(runners) or spec is None:
        return {}
    from crossattn_sizing.audit.executed import executed_runners

    if "v2" in runners:
        print(f"crossattn-sizing: running {spec}'s own V2 sizing (a worker process per release)",
              file=sys.stderr)  # fmt: skip
    # A runner the tree lacks (the CPU runner before 0.34) is not asked of the worker: reading says "absent".
    present = [r for r in runners if r == "v2" or RUNNERS[r].path in set(tree.files(RUNNERS[r].search_under))]
    return executed_runners(spec, present, offline=args.offline, cache_dir=args.cache_dir)


def _startup(tree: SourceTree, args: argparse.Namespace, v2: tuple[Any, str]) -> list[Any]:
    """The release's start-up columns (:mod:`crossattn_sizing.audit.startup`): V2 through its executed
    policy's worker, V1 not run (absent where the release has no V1)."""
    from crossattn_sizing.audit.startup import V1_FILE, startup_verdicts

    spec = getattr(args, "executable", {}).get(tree.label)
    executed, why = v2
    policy = None if executed is None else executed.policy
    has_v1 = V1_FILE in set(tree.files("vllm/v1/worker/"))
    return startup_verdicts(tree.label, None if args.read_only else spec, policy, why, has_v1)


def _prove_v2(tree: SourceTree, verdicts: list, executed: dict) -> None:
    """The "proved for all configs" column: ``prove --symbolic`` on V2 where the audit judged it."""
    from crossattn_sizing.audit.modules import ModuleIndex
    from crossattn_sizing.symbolic.release import v2_symbolic

    for verdict in verdicts:
        if verdict.runner == "v2" and verdict.outcome.judged:
            policy = executed.get("v2", (None, ""))[0]
            verdict.symbolic = v2_symbolic(ModuleIndex(tree), tree.label, policy)


def run(args: argparse.Namespace) -> int:
    """Audit the releases asked for; the exit status says whether every verdict held."""
    runners = list(dict.fromkeys(args.runner)) if args.runner else [*RUNNERS, "startup"]
    # Offline means offline in every command: CROSSATTN_OFFLINE=1 is --offline (never a download),
    # --no-offline overrides it; settled by the CLI (options.settle), which says which decided.
    args.offline_by = "--offline" if options.typed(args, "offline") else f"{settings.OFFLINE}=1"
    for text in args.engine or []:  # an engine that is not vLLM runs the audit its own way, or says why not
        if is_engine(text) and engine_name(text) != AUDITED:
            family = family_of(text)
            # A bare NAME asks for the family's own list of releases; its audit checks what it runs.
            spec = text.strip() if text.strip() == family.name else family.check_spec(text)
            engine = Engine(family, spec)
            return engine.command("audit")(engine.spec, args)
    files = ReportFiles.checked(json=args.json, markdown=args.markdown)  # before any download
    trees = _sources(args)
    sweep = sweep_configs()
    results = []
    for n, tree in enumerate(trees, 1):
        sizing = [r for r in runners if r in RUNNERS]
        executed = _executed(tree, args, sizing if "startup" not in runners else [*sizing, "v2"])
        asked = {k: v for k, v in executed.items() if k in sizing}
        verdicts = audit_tree(tree, sizing, sweep, executed=asked)
        _prove_v2(tree, verdicts, executed)
        if "startup" in runners:
            verdicts += _startup(tree, args, executed.get("v2", (None, "")))
        from crossattn_sizing.engine.client import close_all  # one release's worker at a time

        close_all()
        results.append((tree.label, verdicts))
        done = ", ".join(f"{v.title} {v.outcome} ({v.path}, {v.wall_s or 0:.1f} s)" for v in verdicts)
        print(f"crossattn-sizing: [{n}/{len(trees)}] {tree.label}: {done}", file=sys.stderr, flush=True)
    render(results)
    files.write(
        json=lambda: to_json(results),
        markdown=lambda: render_markdown(
            results, _command(args), {tree.label: provenance(tree) for tree in trees}, len(sweep)
        ),
    )
    return exit_status([v for _, verdicts in results for v in verdicts])
