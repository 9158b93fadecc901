"""Run untrusted Python: a warm fork server, per-run limits and isolation, and
no survivors. See ``runtime/server.py`` for the process tree and
``client.py`` for the trusted side."""

from glyph.sandbox.client import Limits, Run, RunStatus, Sandbox, SandboxUnavailable, get_sandbox

__all__ = ["Limits", "Run", "RunStatus", "Sandbox", "SandboxUnavailable", "get_sandbox"]
