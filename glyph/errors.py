"""The errors a user can fix from the message alone, one class per boundary
the bad input crossed (as verifiers' ``v1/errors.py`` names a rollout
failure by its boundary).

Every command of the ``glyph`` CLI turns a ``GlyphError`` into one line,
``error: <message>``, and exit status 2 (``glyph.cli.common``); anything
else propagates as a bug. So a message names what to change: the file and
line, the option, the command to run first. A module raises the boundary
class itself, or a subclass of it where callers must tell that case apart
(``glyph.report.load.MixedRuns``). The one user error not here is the
sandbox's (``glyph.sandbox.SandboxUnavailable``: the sandbox imports nothing
from glyph, as it runs copied alone); the CLI names it beside these.

Stdlib only and import-free: the ground floor, shipped with the agent layer.
"""

from __future__ import annotations


class GlyphError(Exception):
    """Input a user can correct; the message says what and where, on one line."""


class DataError(GlyphError, ValueError):
    """Task data a command reads: an MBPP JSONL, the conventions tasks, plus tests, a prepared
    folder, the tests given to ``glyph grade``."""


class RunError(GlyphError, ValueError):
    """Saved runs a command reads: eval output directories, rollouts, program traces, a
    flywheel's store."""


class ConfigError(GlyphError, ValueError):
    """A command's options or a config file: a value out of range, two that disagree, a config
    that differs from the one a store was started with."""


class SetupError(GlyphError, RuntimeError):
    """What a command needs around it: the pinned PRIME-RL tree and its patches, a model endpoint
    and its key."""
