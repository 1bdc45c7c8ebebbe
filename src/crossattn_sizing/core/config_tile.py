"""A tile of configs that differ only in their lengths: each base config with each ``(M, E, S)``.

Why: ``prove`` asks a policy with no vectorised form about tiles of tens of
thousands of configs, and every config of a tile is one of a few base configs
(a group row of the domain: block sizes, DCP) with its own ``M``, ``E`` and
``S``. Built here without validating each config again (the domain holds only
valid ones, and validating took half a cheap policy's time), and sent to a
policy's worker as its bases and one packed int64 array of lengths
(:meth:`ConfigTile.to_dict`), so neither side encodes or parses a config per
config: the worker builds the same configs in the same order.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np

from crossattn_sizing.base.errors import ConfigError
from crossattn_sizing.core.config import RunnerConfig

NO_S = -1
"""An absent ``S`` in a tile's lengths (a present one is never negative)."""


class ConfigTile(Sequence[RunnerConfig]):
    """Each base config with each ``(M, E, S)`` of the length arrays, bases outer.

    A config is its base with ``max_model_len = M``,
    ``max_num_encoder_input_tokens = E``, ``max_source_positions = S``
    (``None`` where ``S`` is :data:`NO_S`) and ``max_num_batched_tokens =
    max(M, E)`` (the smallest the engine accepts that admits ``E``). Each
    access builds a fresh config, so a policy that scribbles on one changes
    nothing the judge reads later.
    """

    def __init__(self, bases: Sequence[RunnerConfig], m: np.ndarray, e: np.ndarray, s: np.ndarray) -> None:
        self.bases = tuple(bases)
        self.m, self.e, self.s = (np.asarray(a, dtype=np.int64) for a in (m, e, s))

    def __len__(self) -> int:
        return len(self.bases) * int(self.m.size)

    @staticmethod
    def _built(fields: dict[str, Any], m: int, e: int, s: int) -> RunnerConfig:
        """A config of ``fields`` (a base's, copied: changed here) with these lengths."""
        fields["max_model_len"] = m
        fields["max_num_batched_tokens"] = m if m > e else e
        fields["max_num_encoder_input_tokens"] = e
        fields["max_source_positions"] = None if s == NO_S else s
        config = object.__new__(RunnerConfig)
        config.__dict__.update(fields)
        return config

    @overload
    def __getitem__(self, index: int) -> RunnerConfig: ...

    @overload
    def __getitem__(self, index: slice) -> list[RunnerConfig]: ...

    def __getitem__(self, index: int | slice) -> RunnerConfig | list[RunnerConfig]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"config {index} of a tile of {n}")
        row, col = divmod(index % n, int(self.m.size))
        return self._built(
            dict(self.bases[row].__dict__), int(self.m[col]), int(self.e[col]), int(self.s[col])
        )

    def __iter__(self) -> Iterator[RunnerConfig]:
        built = self._built
        lengths = list(zip(self.m.tolist(), self.e.tolist(), self.s.tolist(), strict=True))
        for base in self.bases:
            fields = dict(base.__dict__)
            for m, e, s in lengths:
                yield built(fields, m, e, s)

    def parts(self, size: int) -> Iterator[ConfigTile]:
        """The tile's configs in order as tiles of one base and at most ``size`` lengths each.

        Why: an engine policy asks its workers a request of a few thousand
        configs at a time, each still crossing as a base and packed lengths.
        """
        n = int(self.m.size)
        for base in self.bases:
            for j in range(0, n, size):
                window = slice(j, min(j + size, n))
                yield ConfigTile([base], self.m[window], self.e[window], self.s[window])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the bases as :meth:`RunnerConfig.to_dict` writes them, the lengths as one
        little-endian int64 array ``M0 E0 S0 M1 ...`` in base64."""
        packed = np.stack([self.m, self.e, self.s], axis=1).astype("<i8").tobytes()
        return {
            "bases": [b.to_dict() for b in self.bases],
            "lengths": base64.b64encode(packed).decode("ascii"),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConfigTile:
        """The tile :meth:`to_dict` wrote; bases are validated as any config read from JSON is."""
        raw = base64.b64decode(data["lengths"])
        if len(raw) % 24:
            raise ConfigError("lengths", len(raw), "must hold whole (M, E, S) triples of int64")
        m, e, s = np.frombuffer(raw, dtype="<i8").reshape(-1, 3).T
        return cls([RunnerConfig.from_dict(b) for b in data["bases"]], m, e, s)
