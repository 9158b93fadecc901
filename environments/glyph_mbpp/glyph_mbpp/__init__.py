"""glyph-mbpp for ``vf-eval glyph-mbpp``: the Taskset, the Harness and the Env
(whose default runtime is the local subprocess runtime) live in
``glyph.envs.mbpp``; this module only exports them, as verifiers' loader expects."""

# In this order: the Env's config pins the harness by id, which imports this
# module back while it is still loading; by then the Harness must be here (isort: off keeps it).
__all__ = ["GlyphTaskset", "GlyphHarness", "GlyphEnv"]

# isort: off
from glyph.envs.mbpp.harness import GlyphHarness  # noqa: E402
from glyph.envs.mbpp.taskset import GlyphTaskset  # noqa: E402
from glyph.envs.mbpp.env import GlyphEnv  # noqa: E402
# isort: on
