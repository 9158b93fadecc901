"""Run untrusted Python: a warm fork server, per-run limits and isolation, and
no survivors. See ``runtime/server.py`` for the process tree and what each
mode protects, and ``client.py`` (the server) and ``run.py`` (one run) for the trusted side."""

from glyph.sandbox.client import MODES, PROTECTIONS, Sandbox, SandboxUnavailable, ServerInfo, get_sandbox
from glyph.sandbox.run import Limits, Run, RunStatus

__all__ = ["MODES", "PROTECTIONS", "Limits", "Run", "RunStatus", "Sandbox", "SandboxUnavailable",
           "ServerInfo", "get_sandbox"]
