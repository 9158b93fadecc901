"""glyph-mbpp: taskset, harness, finalize, test service, gold check, env."""
