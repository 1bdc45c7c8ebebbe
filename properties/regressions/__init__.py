"""Pinned regressions: cases every run replays as explicit examples.

Two sources: the hand-pinned shapes below (the known bug and its safe twin,
from docs/spec.md), and the JSON files in this folder, which the nightly
fuzzer writes for each new failure. A JSON file outlives the example database
and Hypothesis upgrades, so nothing a nightly run finds is lost.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from crossattn_sizing.base.errors import ConfigError
from crossattn_sizing.base.jsoninput import read_json_file
from crossattn_sizing.base.pathkinds import input_folder_problem
from crossattn_sizing.core import admission, known_configs
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.runs.pytest_plugin import RegressionFiles

from ..capacity_strategies import CapacityCase

HERE = Path(__file__).parent

_collecting = RegressionFiles()
"""The run's regression files, as the plugin keeps them in ``config.stash``, copied here by the
suite's conftest: the pinned examples are decorators, run while the test modules are imported, where no
pytest config is at hand (tests read theirs from the ``sizing_regressions`` fixture)."""


def use_regression_files(files: RegressionFiles) -> None:
    """Called by the suite's conftest when a run is configured, and again (with none) when it ends."""
    global _collecting
    _collecting = files


def regressions_dir(files: RegressionFiles | None = None) -> Path:
    """``--regressions`` (``fuzz`` passes it), else the user's variable, else this folder."""
    return (files or _collecting).folder_or(HERE)


def nemotron_parse(max_model_len: int) -> CapacityCase:
    """One Nemotron-Parse page (no max_source_positions) under ``--max-model-len max_model_len``."""
    return CapacityCase(known_configs.nemotron_parse(max_model_len), (known_configs.NEMOTRON_PAGE_TOKENS,))


def whisper() -> CapacityCase:
    """Whisper: 1500 encoder frames, max_source_positions 1500, max_model_len 448 (safe)."""
    return CapacityCase(known_configs.whisper(), (known_configs.WHISPER_FRAMES,))


def load_case(path: Path) -> CapacityCase:
    """Read one regression file written by the fuzzer (see ``case_to_json``).

    A file that does not read back is a :class:`ConfigError` naming the file,
    so a malformed one stops a run with one line instead of a collection
    traceback.
    """
    where = f"regression file {path}"
    try:
        data = read_json_file(where, path)
        lens = data.get("encoder_lens")
        if not isinstance(lens, list) or not lens or not all(
            isinstance(e, int) and not isinstance(e, bool) and e >= 1 for e in lens
        ):
            raise ConfigError("encoder_lens", lens, "must be a non-empty list of positive integers")
        if "config" not in data:
            raise ConfigError("config", None, "is required")
        config = RunnerConfig.from_dict(data["config"])
        for e in lens:  # a request the scheduler never admits is no case: replaying it would blame the policy
            if not admission.admits(config, e):
                bound = admission.encoder_bound(config)
                rule = f"is not admitted by its config (1 <= e <= min(E, B) = {bound})"
                raise ConfigError("encoder_lens", e, rule)
        return CapacityCase(config, tuple(lens))
    except ConfigError as exc:
        if exc.field.startswith(where):
            raise
        raise ConfigError(f"{where}: {exc.field}", exc.value, exc.rule) from None


def case_to_json(case: CapacityCase, **meta: object) -> str:
    """The regression file's text for a case, with free-form metadata (property, policy, seed)."""
    payload = {"config": case.config.to_dict(), "encoder_lens": list(case.encoder_lens), "meta": meta}
    return json.dumps(payload, indent=2, sort_keys=True) + "\n"


def hand_pinned_cases() -> list[CapacityCase]:
    """The known bug at both ends of its range, and the model it spares."""
    return [nemotron_parse(2048), nemotron_parse(3328), whisper()]


def pinned_cases() -> list[CapacityCase]:
    """Every case to replay: the hand-pinned shapes, then the fuzzer's files in name order."""
    cases = hand_pinned_cases()
    folder = regressions_dir()
    if os.path.lexists(folder):  # an unreadable folder would list nothing: refused, not read as empty
        problem = input_folder_problem(folder)
        if problem is not None:
            raise ConfigError(f"regressions folder {folder}", str(folder), problem)
    cases.extend(load_case(p) for p in sorted(folder.glob("*.json")))
    return cases


def record_failure(case: CapacityCase, prop: str, policy: str, files: RegressionFiles) -> Path | None:
    """Write a shrunk failing case as a regression file, once per distinct case.

    Only when the fuzzer asked for it, and only on Hypothesis's final replay of
    the minimal example, so shrinking does not litter the folder. The name is
    a digest of the case, so the same failure found twice is one file.
    """
    from hypothesis.control import current_build_context

    if not files.recording() or not current_build_context().is_final:
        return None
    if case in hand_pinned_cases():  # these already replay on every run
        return None
    text = case_to_json(case, property=prop, policy=policy)
    body = json.dumps(json.loads(text)["config"], sort_keys=True) + repr(case.encoder_lens)
    digest = hashlib.sha256(body.encode()).hexdigest()[:12]
    path = regressions_dir(files) / f"{prop}-{digest}.json"
    if path.exists():
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
