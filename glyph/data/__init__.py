"""The task data: MBPP (official files, splits), the conventions tasks, SFT
traces, plus tests, the gold check, ``glyph data prepare``."""

SEED = 42
"""The split and SFT trace seed of every default (``glyph data prepare --seed``, ``--env.taskset.seed``)."""
