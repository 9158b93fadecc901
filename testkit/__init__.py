"""Test and benchmark support, in the checkout beside ``glyph/`` and not in the wheel: it imports
glyph, glyph imports none of it, and nothing here is on a user's path."""
