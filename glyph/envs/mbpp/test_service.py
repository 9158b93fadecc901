"""The trusted test service the agent program calls for ``python_test`` on
the local runtime: HTTP on 127.0.0.1 only, one per process.

A rollout registers its secret with its visible tests and its grading
``Limits`` (``GlyphHarnessConfig.limits()``, the one source finalize uses
too); the program posts ``{"secret", "request", "source", "shadow"}`` and
gets ``{"outcome"}``, graded by glyph's grader in glyph's sandbox (the
candidate never runs in the program's process or the workspace). The
service keeps its own log of what it graded per rollout; on the local
runtime finalize takes outcomes from that log (``glyph.envs.mbpp.finalize``).

Guarantees:

* Idempotent: ``request`` names one test call (the program's sequence number,
  kind and the candidate's sha256). A retried POST with the same ``request``
  is graded once: it is answered from the rollout's record (or waits for the
  grading already under way), and logged once.
* Every fault is answered: a malformed request or an unknown secret gets 403
  with a JSON body; an exception while grading gets 500 with
  ``{"error": "<class>: <message>"}``, and is recorded in the rollout's
  ``faults`` (the harness returns them with the log). A faulted request is not
  recorded as graded: a retry grades it again.
* Rollouts are independent: each has its own record and lock; one rollout's
  fault touches nothing of another's. (What the sandbox does when one run is
  late is ``glyph.sandbox.client``'s concern.)
"""

from __future__ import annotations

import threading
import traceback

from glyph.agent.tools import sha256
from glyph.grading import grade
from glyph.localhttp import JsonHandler, LocalServer
from glyph.sandbox import Limits

MAX_BODY = 16 << 20


class _Request:
    """One test call: graded once; a retry waits on ``done``."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.outcome: str | None = None
        self.error: str | None = None


class _Rollout:
    def __init__(self, setup: str, tests: str, limits: Limits) -> None:
        self.setup, self.tests, self.limits = setup, tests, limits
        self.log: list[dict] = []
        self.faults: list[dict] = []
        self.requests: dict[str, _Request] = {}
        self.gradings = 0  # how many times the grader ran for this rollout (tests count retries with it)
        self.lock = threading.Lock()

    def test(self, request: str, source: str, shadow: bool) -> str:
        """The outcome of ``request``: graded on its first arrival, answered
        from the record on a retry. Raises what the grader raised (recorded)."""
        with self.lock:
            req = self.requests.get(request)
            first = req is None or (req.done.is_set() and req.outcome is None)  # none yet, or it faulted
            if first:
                req = self.requests[request] = _Request()
        if not first:
            req.done.wait()
            if req.outcome is None:
                raise RuntimeError(f"request {request!r} faulted: {req.error}")
            return req.outcome
        try:
            with self.lock:
                self.gradings += 1
            outcome = grade(source, self.setup, self.tests, limits=self.limits).outcome.value
        except BaseException as exc:
            req.error = f"{type(exc).__name__}: {exc}"
            with self.lock:
                self.faults.append({"request": request, "sha256": sha256(source), "shadow": shadow,
                                    "error": req.error, "traceback": traceback.format_exc()[-2000:]})
            req.done.set()
            raise
        with self.lock:
            self.log.append({"request": request, "sha256": sha256(source), "outcome": outcome,
                             "shadow": shadow})
        req.outcome = outcome
        req.done.set()
        return outcome


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
                    request = str(req.get("request") or f"unnamed:{sha256(source)}:{shadow}")
                except (ValueError, KeyError, TypeError):
                    return self.send_json(403, {"error": "unknown rollout or malformed request"})
                try:
                    outcome = rollout.test(request, source, shadow)
                except Exception as exc:  # deliberate: recorded in the rollout's faults, answered 500
                    return self.send_json(500, {"error": f"the test service failed to grade: "
                                                         f"{type(exc).__name__}: {exc}"})
                self.send_json(200, {"outcome": outcome})

        self.server = LocalServer(Handler)
        self.server.start("glyph-test-service")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/test"

    def register(self, secret: str, setup: str, tests: list[str], limits: Limits) -> None:
        self.rollouts[secret] = _Rollout(setup, "\n".join(tests), limits)

    def unregister(self, secret: str) -> list[dict]:
        """The rollout's log (what it graded, in order), forgetting the rollout."""
        return self.release(secret)["log"]

    def release(self, secret: str) -> dict:
        """Forget the rollout; its ``log``, ``faults`` and ``gradings``."""
        rollout = self.rollouts.pop(secret, None)
        if rollout is None:
            return {"log": [], "faults": [], "gradings": 0}
        with rollout.lock:
            return {"log": list(rollout.log), "faults": list(rollout.faults), "gradings": rollout.gradings}

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
