"""glyph-mbpp: the verifiers environment (program, taskset, harness, env)."""
