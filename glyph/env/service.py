"""The trusted test service the agent program calls for ``python_test`` on
the local runtime: HTTP on 127.0.0.1 only, one per process.

A rollout registers its secret with its visible tests; the program posts
``{"secret", "source", "shadow"}`` and gets ``{"outcome"}``, graded by
glyph's grader in glyph's sandbox (the candidate never runs in the
program's process or the workspace). The service keeps its own log of what
it graded per rollout, which finalize compares with the trace's claims.
"""

from __future__ import annotations

import threading

from glyph.env.verify import sha256
from glyph.grading import grade
from glyph.localhttp import JsonHandler, LocalServer
from glyph.sandbox import Limits

MAX_BODY = 16 << 20


class _Rollout:
    def __init__(self, setup: str, tests: str, limits: Limits) -> None:
        self.setup, self.tests, self.limits = setup, tests, limits
        self.log: list[dict] = []
        self.lock = threading.Lock()


class SandboxTestService:
    def __init__(self) -> None:
        self.rollouts: dict[str, _Rollout] = {}
        service = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:  # noqa: N802
                try:
                    if self.path != "/test":
                        raise KeyError(self.path)
                    req = self.read_json(MAX_BODY)
                    rollout = service.rollouts[req["secret"]]
                    source, shadow = str(req["source"]), bool(req.get("shadow"))
                except (ValueError, KeyError, TypeError):
                    return self.send_json(403, {"error": "unknown rollout or malformed request"})
                outcome = grade(source, rollout.setup, rollout.tests, limits=rollout.limits).outcome.value
                with rollout.lock:
                    rollout.log.append({"sha256": sha256(source), "outcome": outcome, "shadow": shadow})
                self.send_json(200, {"outcome": outcome})

        self.server = LocalServer(Handler)
        self.server.start("glyph-test-service")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/test"

    def register(self, secret: str, setup: str, tests: list[str], limits: Limits) -> None:
        self.rollouts[secret] = _Rollout(setup, "\n".join(tests), limits)

    def unregister(self, secret: str) -> list[dict]:
        rollout = self.rollouts.pop(secret, None)
        return list(rollout.log) if rollout else []

    def close(self) -> None:
        self.server.close()


_service: SandboxTestService | None = None
_lock = threading.Lock()


def get_service() -> SandboxTestService:
    global _service
    with _lock:
        if _service is None:
            _service = SandboxTestService()
        return _service
