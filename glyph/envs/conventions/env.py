"""The glyph-conventions Env: verifiers' single-agent env with the conventions
harness on the local subprocess runtime by default."""

from __future__ import annotations

import verifiers.v1 as vf

from glyph.envs import model_faults
from glyph.envs.conventions.harness import ConventionsHarnessConfig
from glyph.record import CONVENTIONS_ENV_ID

__all__ = ["ConventionsEnv"]


class ConventionsEnvConfig(vf.SingleAgentEnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig(),
                                           harness=ConventionsHarnessConfig(id=CONVENTIONS_ENV_ID))


class ConventionsEnv(model_faults.SaysModelFaults, vf.SingleAgentEnv, vf.Env[ConventionsEnvConfig]):
    """One agent seat running the conventions harness (verifiers types the config from ``vf.Env[...]``)."""

    MODEL_FAULTS_NAME = CONVENTIONS_ENV_ID
