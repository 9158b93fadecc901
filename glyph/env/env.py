"""The glyph-mbpp Env: Taskset + Harness on the local subprocess runtime by
default (``--env.agent.runtime.type docker|prime|...`` to scale out)."""

from __future__ import annotations

import verifiers.v1 as vf

from glyph.env.harness import GlyphHarness, GlyphHarnessConfig
from glyph.env.taskset import GlyphTaskset

__all__ = ["GlyphEnv", "GlyphHarness", "GlyphTaskset"]


class GlyphEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig(),
                                           harness=GlyphHarnessConfig(id="glyph-mbpp"))


class GlyphEnv(vf.Env[GlyphEnvConfig]):
    async def run(self, task, agents):
        await agents.agent.run(task)
