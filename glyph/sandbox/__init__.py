"""Run untrusted Python: a warm fork server, per-run limits and isolation, and
no survivors. See ``runtime/server.py`` for the process tree and what each
mode protects, and ``client.py`` for the trusted side."""

from glyph.sandbox.client import (MODES, PROTECTIONS, Limits, Run, RunStatus, Sandbox, SandboxUnavailable,
    ServerInfo, get_sandbox)

__all__ = ["MODES", "PROTECTIONS", "Limits", "Run", "RunStatus", "Sandbox", "SandboxUnavailable",
           "ServerInfo", "get_sandbox"]
