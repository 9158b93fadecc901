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


class GlyphEnv(vf.SingleAgentEnv, vf.Env[GlyphEnvConfig]):
    """One agent seat running glyph-mbpp's harness (verifiers types the config from ``vf.Env[...]``)."""

    _watch: model_faults.Watch | None = None

    async def start(self) -> None:
        """Before any rollout: say the first failed model call on the terminal
        (``glyph.envs.model_faults``)."""
        await super().start()
        self._watch = model_faults.start(MBPP_ENV_ID)

    async def stop(self) -> None:
        model_faults.stop(self._watch)
        self._watch = None
        await super().stop()
