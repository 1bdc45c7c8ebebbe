"""``--engine NAME==X`` / ``--engine NAME@PATH``, read the same way by every command.

The command names the engine family only through the registry
(:func:`crossattn_sizing.engine.registry.family_of`); the family checks the
spec and says which of the command's options do not apply to it, and each of
those that was given, typed or by its ``CROSSATTN_*`` variable, is refused in
one line saying why (never ignored). Then
either the family's release is the command's policy and implementation
(vLLM, its mode :attr:`~crossattn_sizing.engine.interface.EngineMode.SUBJECT`),
or the family runs the command its own way, or the command cannot run it and
says so.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from crossattn_sizing.base import settings
from crossattn_sizing.base.errors import OptionError
from crossattn_sizing.engine.interface import EngineCommand, EngineFamily, EngineMode
from crossattn_sizing.engine.registry import family_of

DESTS = {"--encoder-len": "encoder_lens", "-k": "select"}
"""Options whose parsed name is not the flag's in some command (``check --encoder-len``); the flag's
own name (``--call-timeout`` -> ``call_timeout``) is tried too."""


@dataclass(frozen=True)
class Engine:
    """The engine a command was given: its family and the checked spec."""

    family: EngineFamily
    spec: str

    @property
    def subject(self) -> str | None:
        """The ``--policy``/``--impl`` spec that runs the engine when its family's mode is
        :attr:`~crossattn_sizing.engine.interface.EngineMode.SUBJECT`; None for any other mode (the engine
        runs the command its own way, :meth:`command`)."""
        if self.family.mode is EngineMode.SUBJECT:
            return self.family.subject_spec(self.spec)
        return None

    def command(self, name: str) -> EngineCommand:
        """The engine's own run of command ``name``; one line, exit 2, when it has none."""
        run = self.family.command(name)
        if run is None:
            raise OptionError("--engine", self.spec, f"{name} cannot run {self.family.name}: "
                              f"{self.family.unsupported(name)}")  # fmt: skip
        return run


def given(args: argparse.Namespace, flag: str) -> object:
    """The value of ``flag`` when the user typed it (None, False and [] are "not given"; a value the
    option's ``CROSSATTN_*`` variable or its default settled is not typed: ``--engine`` beats it)."""
    settled = getattr(args, "settled", {})
    for dest in (DESTS.get(flag), flag.lstrip("-").replace("-", "_")):
        if dest in settled and not str(settled[dest]).startswith("-"):
            continue
        value = getattr(args, dest, None) if dest else None
        if not (value is None or value is False or value == []):
            return value
    return None


NAMES_THE_SUBJECT = ("--policy", "--impl")
"""Options that name the code under test: ``--engine`` names it outright, so their variables yield to it
(``docs/settings.md``); typed, they are refused as any other."""


def set_by_variable(args: argparse.Namespace, flag: str) -> str | None:
    """The ``CROSSATTN_*`` variable that gave ``flag`` a value (one saying no, as ``CROSSATTN_IN_PROCESS=0``
    does, gives none), or None when it was typed, defaulted or left empty."""
    settled = getattr(args, "settled", {})
    for dest in (DESTS.get(flag), flag.lstrip("-").replace("-", "_")):
        source = settled.get(dest) if dest else None
        value = getattr(args, dest, None) if dest else None
        if source in settings.READERS and not (value is None or value is False or value == []):
            return str(source)
    return None


def engine_of(args: argparse.Namespace, command: str) -> Engine | None:
    """The engine ``--engine`` names for ``command`` (None without one), after refusing every option
    given that does not apply to it, typed or set by its variable (the variables of the options that
    name the code under test aside: :data:`NAMES_THE_SUBJECT`)."""
    text = getattr(args, "engine", None)
    if text is None:
        return None
    family = family_of(text)
    spec = family.check_spec(text)
    for flag, why in family.refused(command).items():
        value = given(args, flag)
        if value is not None:  # a repeatable option's values as typed: ``--policy a b``
            typed = " ".join(map(str, value)) if isinstance(value, list) else value
            raise OptionError(flag, typed, f"does not apply with --engine {spec}: {why}")
        variable = None if flag in NAMES_THE_SUBJECT else set_by_variable(args, flag)
        if variable is not None:  # a variable is an option typed earlier (docs/settings.md)
            rule = f"does not apply with --engine {spec} ({flag}): {why}; unset it for this run"
            raise settings.SettingError(variable, settings.raw(variable) or "", rule)
    return Engine(family, spec)
