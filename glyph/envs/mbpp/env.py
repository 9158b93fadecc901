"""The glyph-mbpp Env (``glyph.envs.local.single_agent_env``)."""

from __future__ import annotations

from glyph.envs.local import single_agent_env
from glyph.envs.mbpp.harness import GlyphHarnessConfig
from glyph.record import MBPP_ENV_ID

__all__ = ["GlyphEnv"]

GlyphEnvConfig, GlyphEnv = single_agent_env("GlyphEnv", GlyphHarnessConfig(id=MBPP_ENV_ID),
                                            "glyph-mbpp: one agent seat running glyph-mbpp's harness.", __name__)
