"""The glyph-conventions Env: the conventions taskset and harness
(``glyph.env.conventions``) on the local subprocess runtime by default
(``--env.agent.runtime.type docker|prime|...`` to scale out).

Apart from ``glyph.env.conventions`` because the Env's config pins the harness
by id, and resolving that id imports ``glyph_conventions``, which must
already export the harness by then."""

from __future__ import annotations

import verifiers.v1 as vf

from glyph.env.conventions import ConventionsHarnessConfig

__all__ = ["ConventionsEnv"]


class ConventionsEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig(),
                                           harness=ConventionsHarnessConfig(id="glyph-conventions"))


class ConventionsEnv(vf.Env[ConventionsEnvConfig]):
    async def run(self, task, agents):
        await agents.agent.run(task)
