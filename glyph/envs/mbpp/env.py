"""The glyph-mbpp Env: verifiers' single-agent env with glyph-mbpp's harness on
the local subprocess runtime by default (``--env.agent.runtime.type
docker|prime|...`` to scale out)."""

from __future__ import annotations

import verifiers.v1 as vf

from glyph.envs import model_faults
from glyph.envs.mbpp.harness import GlyphHarnessConfig
from glyph.record import MBPP_ENV_ID

__all__ = ["GlyphEnv"]


class GlyphEnvConfig(vf.SingleAgentEnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig(),
                                           harness=GlyphHarnessConfig(id=MBPP_ENV_ID))


class GlyphEnv(model_faults.SaysModelFaults, vf.SingleAgentEnv, vf.Env[GlyphEnvConfig]):
    """One agent seat running glyph-mbpp's harness (verifiers types the config from ``vf.Env[...]``)."""

    MODEL_FAULTS_NAME = MBPP_ENV_ID
