"""glyph-conventions: taskset, harness, env."""
