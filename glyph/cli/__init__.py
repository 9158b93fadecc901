"""The ``glyph`` command: ``glyph.cli.app``, one module per command group."""
