"""Plus tests: differential tests generated from MBPP's reference solutions
(how, and what they guarantee: ``glyph.data.plus.generate``).

This package's top level is the reading side only, what grading with plus
tests needs (``glyph.envs.mbpp.taskset``, ``glyph grade --plus``): where
the files are (``resolve_dir``), a task's current tests (``current``,
``load_tests``) and the files themselves (``read_file``, ``file_name``).
It imports neither the sandbox nor the generator; those that generate
import ``glyph.data.plus.generate``.

Modules, one job each: ``store`` (the per-task files), ``plain`` (which
values a test may hold), ``seeds`` (the visible asserts' target calls),
``mutate`` (candidate inputs), ``probe`` (the reference's answers, in the
sandbox), ``selection`` (which answers become tests), ``generate`` (all of
it, over many tasks).
"""

from glyph.data.plus.store import (DEFAULT_DIR, ENV_VAR, GENERATOR, current, file_name, load_tests, read_file,
    resolve_dir, task_hash)

__all__ = ["DEFAULT_DIR", "ENV_VAR", "GENERATOR", "current", "file_name", "load_tests", "read_file",
           "resolve_dir", "task_hash"]
