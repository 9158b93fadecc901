"""glyph-conventions for ``vf-eval glyph-conventions``: the Taskset, the
Harness and the Env (``glyph.envs.conventions``), exported as verifiers'
loader expects."""

# In this order: the Env's config pins the harness by id, which imports this
# module back while it is still loading; by then the Harness must be here (isort: off keeps it).
__all__ = ["ConventionsTaskset", "ConventionsHarness", "ConventionsEnv"]

# isort: off
from glyph.envs.conventions.harness import ConventionsHarness  # noqa: E402
from glyph.envs.conventions.taskset import ConventionsTaskset  # noqa: E402
from glyph.envs.conventions.env import ConventionsEnv  # noqa: E402
# isort: on
