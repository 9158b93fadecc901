"""The glyph-conventions Env (``glyph.envs.local.single_agent_env``)."""

from __future__ import annotations

from glyph.envs.conventions.harness import ConventionsHarnessConfig
from glyph.envs.local import single_agent_env
from glyph.record import CONVENTIONS_ENV_ID

__all__ = ["ConventionsEnv"]

ConventionsEnvConfig, ConventionsEnv = single_agent_env(
    "ConventionsEnv", ConventionsHarnessConfig(id=CONVENTIONS_ENV_ID),
    "glyph-conventions: one agent seat running the conventions harness.", __name__)
