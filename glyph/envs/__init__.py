"""The verifiers v1 environments: glyph-mbpp and glyph-conventions."""
