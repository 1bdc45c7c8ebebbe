"""A solver's model as a concrete config, judged by ``check``'s own code on the concrete policy.

A model is only a claim about the symbolic encoding. It becomes a verdict only
when the policy's concrete code, asked about the same config by
:func:`crossattn_sizing.core.capacity.violations` (what ``check`` prints), falls
short too; the :func:`~crossattn_sizing.core.check_line.check_line` printed with
it replays it from a shell.
"""

from __future__ import annotations

from crossattn_sizing.core.capacity import Shortfall, violations
from crossattn_sizing.core.config import KVCacheGroup, RunnerConfig
from crossattn_sizing.core.policies import Policy
from crossattn_sizing.symbolic.terms import ConfigTerms


def model_config(cfg: ConfigTerms, model: dict[str, int]) -> tuple[RunnerConfig, int]:
    """The config and the encoder length a model names (validated as any config is)."""
    groups = tuple(
        KVCacheGroup(g.kind, model[f"groups[{i}].block_size"], model[f"groups[{i}].kernel_block_size"])
        for i, g in enumerate(cfg.groups)
    )
    config = RunnerConfig(
        max_model_len=model["max_model_len"],
        max_num_batched_tokens=model["max_num_batched_tokens"],
        max_num_encoder_input_tokens=model["max_num_encoder_input_tokens"],
        max_source_positions=model.get("max_source_positions"),
        dcp_size=model["dcp_size"],
        dcp_interleave=model["dcp_interleave"],
        groups=groups,
    )
    return config, model["encoder_len"]


def replay(policy: Policy, config: RunnerConfig, encoder_len: int) -> list[Shortfall]:
    """What ``check`` finds for one request of ``encoder_len`` encoder tokens under ``policy``."""
    return violations(policy, config, [encoder_len])
