"""glyph-conventions for ``vf-eval glyph-conventions``: the Taskset, the
Harness and the Env (whose default runtime is the local subprocess runtime)
live in ``glyph.env.conventions`` and ``glyph.env.conventions_env``; this
module only exports them, as verifiers' loader expects."""

# In this order: the Env's config pins the harness by id, which imports this
# module back while it is still loading; by then the Harness must be here.
__all__ = ["ConventionsTaskset", "ConventionsHarness", "ConventionsEnv"]

from glyph.env.conventions import ConventionsHarness, ConventionsTaskset  # noqa: E402
from glyph.env.conventions_env import ConventionsEnv  # noqa: E402
