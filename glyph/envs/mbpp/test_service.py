"""The trusted test service the agent program calls for ``python_test`` on
the local runtime: HTTP on 127.0.0.1 only, one per process.

A rollout registers its secret with its visible tests and its grading
``Limits`` (``GlyphHarnessConfig.limits()``, the one source finalize uses
too); the program posts ``{"secret", "request", "source", "shadow"}`` and
gets ``{"outcome"}``, graded by glyph's grader in glyph's sandbox (the
candidate never runs in the program's process or the workspace). The
service keeps its own log of what it graded per rollout; on the local
runtime finalize takes outcomes from that log (``glyph.envs.mbpp.finalize``).
Each entry is the full grade (``outcome`` and ``detail``) of the source it
names by sha256, with the ``key`` it was graded under
(``glyph.grading.grading_key``: the setup, the tests and the limits, as this
service holds them, never as a request says): where the final solution is a
source the service graded under finalize's own key for the hidden suite
(MBPP's hidden tests are its visible ones), finalize takes that grade
instead of grading it again.

When the episode ends the program posts ``{"secret", "end", "turns"}`` to
``/end`` (``end_url``; ``glyph.agent.program.report_end``): how it ended
(``final``, ``protocol_error``, ...) and how many model replies it applied.
The service keeps that report with the log (``release(secret)["end"]``;
None when the program never reported, e.g. it was killed at the rollout's
timeout), and finalize decides whether the episode ended with FINAL from it,
not from the trace. On the local runtime no model-written code runs beside
the program (python_test is graded here), so only the program holds the
secret.

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
* One end per rollout: the first report is kept; the same report again (a
  retried POST) is answered 200, a different one 409 and not kept.
* Rollouts are independent: each has its own record and lock; one rollout's
  fault touches nothing of another's. (What the sandbox does when one run is
  late is ``glyph.sandbox.client``'s concern.)
"""

from __future__ import annotations

import threading
import traceback

from glyph.agent.trace import sha256
from glyph.grading import grade, grading_key
from glyph.localhttp import JsonHandler, LocalServer
from glyph.sandbox import Limits
from glyph.semantics import GLYPH, Semantics

MAX_BODY = 16 << 20


class _Request:
    """One test call: graded once; a retry waits on ``done``."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.outcome: str | None = None
        self.error: str | None = None


class _Rollout:
    def __init__(self, setup: str, tests: str, limits: Limits, semantics: Semantics = GLYPH) -> None:
        self.setup, self.tests, self.limits, self.semantics = setup, tests, limits, semantics
        self.key = grading_key(setup, tests, limits, semantics)  # every grading of this rollout is under it
        self.log: list[dict] = []
        self.faults: list[dict] = []
        self.end: dict | None = None  # the program's report of how the episode ended
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
            graded = grade(source, self.setup, self.tests, limits=self.limits, semantics=self.semantics)
            outcome = graded.outcome.value
        except BaseException as exc:
            req.error = f"{type(exc).__name__}: {exc}"
            with self.lock:
                self.faults.append({"request": request, "sha256": sha256(source), "shadow": shadow,
                                    "error": req.error, "traceback": traceback.format_exc()[-2000:]})
            req.done.set()
            raise
        with self.lock:
            self.log.append({"request": request, "sha256": sha256(source), "outcome": outcome,
                             "shadow": shadow, "detail": graded.detail, "key": self.key})
        req.outcome = outcome
        req.done.set()
        return outcome

    def report(self, end: str, turns: int) -> bool:
        """Keep the program's report of how the episode ended; False (not
        kept) when a different one was kept before."""
        with self.lock:
            if self.end is None:
                self.end = {"end": end, "turns": turns}
            return self.end == {"end": end, "turns": turns}


class SandboxTestService:
    def __init__(self) -> None:
        self.rollouts: dict[str, _Rollout] = {}
        service = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:  # noqa: N802
                if self.path == "/end":
                    return self.end()
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

            def end(self) -> None:
                try:
                    req = self.read_json(1 << 16)
                    rollout = service.rollouts[req["secret"]]
                    end, turns = req["end"], req["turns"]
                    if not isinstance(end, str) or type(turns) is not int:
                        raise TypeError("end is a string, turns an int")
                except (ValueError, KeyError, TypeError):
                    return self.send_json(403, {"error": "unknown rollout or malformed report"})
                if not rollout.report(end, turns):
                    return self.send_json(409, {"error": "this rollout already reported another end"})
                self.send_json(200, {"end": end})

        self.server = LocalServer(Handler)
        self.server.start("glyph-test-service")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/test"

    @property
    def end_url(self) -> str:
        """Where the program reports how its episode ended."""
        return f"http://127.0.0.1:{self.server.port}/end"

    def register(self, secret: str, setup: str, tests: list[str], limits: Limits,
                 semantics: Semantics = GLYPH) -> None:
        """Grade the rollout ``secret``'s tests under ``limits`` and ``semantics`` (its profile's)."""
        self.rollouts[secret] = _Rollout(setup, "\n".join(tests), limits, semantics)

    def unregister(self, secret: str) -> list[dict]:
        """The rollout's log (what it graded, in order), forgetting the rollout."""
        return self.release(secret)["log"]

    def release(self, secret: str) -> dict:
        """Forget the rollout; its ``log``, ``faults``, ``gradings`` and
        ``end`` (the program's report, ``{"end", "turns"}``; None: none came)."""
        rollout = self.rollouts.pop(secret, None)
        if rollout is None:
            return {"log": [], "faults": [], "gradings": 0, "end": None}
        with rollout.lock:
            return {"log": list(rollout.log), "faults": list(rollout.faults), "gradings": rollout.gradings,
                    "end": None if rollout.end is None else dict(rollout.end)}

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
