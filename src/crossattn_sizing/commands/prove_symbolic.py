"""``crossattn-sizing prove --symbolic``: coverage proved for all configs by z3, or a model ``check`` replays.

Takes a built-in policy (its length and alignment rules as terms) or a vLLM
release's own sizing code (``vllm==X``, ``vllm@PATH``: ModelRunner V2's
``initialize_kv_cache`` read by the audit evaluator with terms). A ``module:attr``
policy is refused: its code is arbitrary Python run in a worker, with nothing
to read symbolically and no sound way to tell what it computes for a config it
was not asked about, so it keeps the bounded proof (docs/spec.md, "prove
--symbolic"). A model is replayed through ``check``'s code on the concrete
policy: the release executed where it runs here, else its source read with
integers by the audit (a note says which).

Exit status: 0 proved for all configs, 1 a model the concrete code fails on,
2 bad arguments or z3 missing, 3 not run (the reason printed).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from crossattn_sizing.audit.extract import RUNNERS, ReadError, read_runner
from crossattn_sizing.audit.modules import ModuleIndex
from crossattn_sizing.base.errors import HarnessError, OptionError, ReleaseUnavailable, shown
from crossattn_sizing.base.outcome import exit_status
from crossattn_sizing.commands import options
from crossattn_sizing.core.policies import BUILTIN_POLICIES, Policy
from crossattn_sizing.engine.specs import TREE_PREFIX, tree_root
from crossattn_sizing.releases.sources import SourceTree, open_dir, open_release
from crossattn_sizing.runs.outputs import check_outputs, output_file, write_json
from crossattn_sizing.specs.resolve import check_engine_spec, load_checked_policy
from crossattn_sizing.symbolic.builtin import builtin_paths
from crossattn_sizing.symbolic.engine import runner_paths
from crossattn_sizing.symbolic.run import PathsOf, SymbolicResult, prove_symbolic
from crossattn_sizing.symbolic.terms import z3_module

ACCEPTED = "prove --symbolic takes a built-in policy, vllm==X or vllm@PATH"


def refuse_bounded_options(args: argparse.Namespace, bounded: dict[str, tuple[str, Any]]) -> None:
    """The bounded proof's options mean nothing to a proof for all configs: the first given is refused.

    ``bounded`` maps each such option's ``dest`` to ``(option, value when not given)``.
    """
    for dest, (option, unset) in bounded.items():
        if getattr(args, dest) != unset:
            said = shown(str(getattr(args, dest)))
            rule = "is an option of the bounded proof; --symbolic proves every config"
            raise OptionError(option, said, rule)


def _subject(spec: str, args: argparse.Namespace) -> tuple[PathsOf, Policy, str]:
    """How ``spec``'s widths become terms, the concrete policy a model is replayed on, and a note."""
    if spec in BUILTIN_POLICIES:
        policy = BUILTIN_POLICIES[spec]
        return (lambda enc, cfg: builtin_paths(enc, cfg, policy)), policy, ""
    if spec.startswith("vllm==") or spec.startswith(TREE_PREFIX):
        spec = check_engine_spec("--policy", spec)
        tree: SourceTree
        if spec.startswith(TREE_PREFIX):
            tree = open_dir(tree_root(spec))
        else:
            tree = open_release(spec.removeprefix("vllm=="), offline=bool(getattr(args, "offline", False)))
        index = ModuleIndex(tree)
        try:
            paths_of = runner_paths(index, RUNNERS["v2"])
            read = read_runner(index, "v2")
        except ReadError as exc:
            raise ReleaseUnavailable(
                f"--policy {spec}: ModelRunner V2's sizing cannot be read: {exc}"
            ) from None
        try:
            return paths_of, load_checked_policy(spec, options.isolation(args)), ""
        except HarnessError as exc:  # the release does not run here: its own source, read with integers
            note = (
                f"models are replayed on the release's source read with integers ({spec} does not run: {exc})"
            )
            return paths_of, read, note
    if ":" in spec:
        raise OptionError("--policy", shown(spec), "a module:attr policy has no symbolic form (arbitrary "
                          "Python); prove it over the bounded domain (prove without --symbolic)")  # fmt: skip
    raise OptionError("--policy", shown(spec), ACCEPTED)


def report(result: SymbolicResult) -> None:
    """The result as lines: the verdict, then the model, what check found and the replay line."""
    verdict = "" if result.proved else f"{result.outcome.value.upper()}: "
    print(f"{result.policy}: {verdict}{result.detail} ({result.seconds:.2f} s)")
    for line in result.shortfalls:
        print(f"  check: FAIL  {line}")
    if result.replay_line:
        print(f"  replay: {result.replay_line}")


def run_symbolic(args: argparse.Namespace, bounded: dict[str, tuple[str, Any]]) -> int:
    """``prove --symbolic``: the exit status of the verdict (``bounded``: :func:`refuse_bounded_options`)."""
    refuse_bounded_options(args, bounded)
    z3_module()  # one line when z3 is missing, before anything is read
    check_outputs({"--json": args.json})
    json_path = output_file("--json", args.json)
    spec = args.policy.strip()
    paths_of, concrete, note = _subject(spec, args)
    if note:
        print(f"note: {note}", file=sys.stderr)
    result = prove_symbolic(spec, concrete, paths_of)
    report(result)
    if json_path:
        payload: dict[str, Any] = result.to_dict()
        write_json(json_path, payload)
        print(f"wrote {json_path}", file=sys.stderr)
    return exit_status([result.outcome])
