"""glyph: a sandboxed MBPP environment, PREDICT and the flywheel benchmark."""
