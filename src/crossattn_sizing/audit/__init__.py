"""Audit real vLLM releases: read the block-table sizing out of their source and check it.

The audit never installs, imports or runs vLLM. It reads the model runners'
Python files out of a release wheel (or a directory), walks the syntax tree of
``initialize_kv_cache`` and the block-table classes it builds, and evaluates
only the sizing arithmetic against the harness's
:class:`~crossattn_sizing.core.config.RunnerConfig`. Anything it cannot evaluate is
reported as "could not be read", naming what was missing: a guess would turn a
real overflow into a false "holds".

Modules (a release's files come from :mod:`crossattn_sizing.releases.sources`): :mod:`.modules`
(parsed modules and name resolution), :mod:`.known` (what engine names mean),
:mod:`.standins` (the harness's replacements for engine helpers, shaped by the
release's own definitions), :mod:`.interp` (the restricted evaluator, a
package), :mod:`.extract` (runners to policies), :mod:`.verdicts` (coverage and
allocation over a sweep), :mod:`.scope` (which models V2 serves) and
:mod:`.executed` (the verdict from running the release's own code). The report (table,
JSON, Markdown) is the command's: :mod:`crossattn_sizing.commands.audit_report`.

Every verdict records its ``path``: "read" for this source-reading audit. It
is the fallback where the release's own code cannot be executed; an executed
verdict would carry "executed" in the same field.
"""

from crossattn_sizing.audit.extract import RUNNERS, ExtractedPolicy, ReadError, read_runner
from crossattn_sizing.audit.verdicts import RunnerVerdict, audit_tree
from crossattn_sizing.releases.sources import DirTree, SourceTree, ZipTree, fetch_wheel, open_dir

__all__ = [
    "RUNNERS",
    "DirTree",
    "ExtractedPolicy",
    "ReadError",
    "RunnerVerdict",
    "SourceTree",
    "ZipTree",
    "audit_tree",
    "fetch_wheel",
    "open_dir",
    "read_runner",
]
