"""The agent program, run inside the rollout's runtime (stdlib only: shipped
whole with the rest of the agent layer, the grader and the sandbox).

It reads its configuration from ``CONFIG`` (or ``$GLYPH_CONFIG``) and the
rollout secret from ``$GLYPH_ROLLOUT_SECRET`` (or the file ``$GLYPH_SECRET_FILE``
names), never from argv. The loop: ask the model for a turn, parse it
(``protocol.parse_turn``), run its one tool call (``tools.execute``), answer
with a RESULT, until FINAL, a protocol error, the budget or a fault.
``python_test`` is answered by a tester: the trusted test service on the
local runtime (``tester.kind = "service"``; each POST names its test call, so
a retry is graded once), or glyph's grader in this process where the
container is the isolation (``"local"``, in the sandbox mode the harness
chose). Both grade under the harness's ``limits``. Every candidate and Arm
B's predictions are recorded in ``TRACE`` (``glyph.agent.trace.Trace``), which
is untrusted: finalize checks every claim in it.

How the episode ended is also told to the trusted side where there is one:
with the service tester, ``run`` posts ``{"secret", "end", "turns"}`` to the
test service's ``end_url`` when the episode ends, before the trace is saved
with its end, so a trace that names an end was reported first
(``glyph.envs.mbpp.finalize`` takes the end from the service's record, not
from the trace). A model call that is retried is marked as a retry
(``x-stainless-retry-count``), so verifiers' interception server serves the
turn it already committed instead of sampling a second one, and its record
of the model's replies holds one reply per turn the program applied.

Exit status: 0 when the episode ended on the model's account (FINAL, a
protocol error, the budget); ``ENDPOINT_FAILED`` (97) when the model endpoint
failed for good; ``TESTER_FAILED`` (98) when the tester failed, or the end
could not be reported to the test service; each fault also as one line on
stderr, after the trace is saved.

What model text can and cannot cause: a reply is applied by the profile's
episode, whose ``turn`` never raises on it (``glyph.agent.profiles.base.model_turn``):
whatever the reply holds (NUL bytes, lone surrogates, control characters,
names too long, integers past Python's digit limit, JSON nested past the
stack, a reply past ``REPLY_CAP``), it ends the episode as a protocol error
or the budget, or answers a failed tool call, and the program exits 0. So
a model can cause exit 0 only. 98 comes only from a ``TesterFault``, which
only the tester raises (the test service did not answer or said it failed,
the local grader raised, an answer that is no outcome class) and from an
end report the service did not take; 97 only from the endpoint (an HTTP
error, no answer, a body that is not JSON, invalid UTF-8 included, or has
no ``choices[0].message.content``: the interception server writes the
model's text as JSON, so none of these is a reply's content). A reply whose
content is ``null`` is the empty reply, as the study's program reads it
(``content or ""``). A bug of glyph's own in the loop outside a turn ends
the episode as ``program_error`` (exit 0: finalize scores it 0 with the
traceback as its reason).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

if not __package__:  # run as the shipped script: the root that holds glyph/ is two folders up
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from glyph.agent import profiles  # noqa: E402
from glyph.agent.httppost import HTTPStatusError, post  # noqa: E402
from glyph.agent.profiles.base import TesterFault  # noqa: E402
from glyph.agent.trace import ENDPOINT_ERROR, FINAL, PROGRAM_ERROR, TESTER_ERROR, ToolCall, Trace, sha256  # noqa: E402
from glyph.outcomes import Outcome  # noqa: E402

TRACE = ".glyph/trace.json"  # the program's record of the episode (untrusted on the trusted side)
CONFIG = ".glyph/config.json"  # its configuration, unless $GLYPH_CONFIG names another file
REPLY_CAP = 64 * 1024  # characters of a model reply kept; a longer one is cut and recorded
RETRIES = 3  # for transient failures only: connection dropped, 5xx, 429
ENDPOINT_FAILED = 97
"""verifiers' reserved exit status for a model call that failed for good
(``MODEL_TRANSPORT_ERROR_EXIT_CODE``; ``glyph.vfcompat``, 5.)."""
TESTER_FAILED = 98
TRANSIENT = (TimeoutError, ConnectionError)
"""What ``httppost.post`` raises for a request that got no answer (``ConnectionError``: not
connected, not sent, broken off; ``TimeoutError``: too slow)."""


class EndpointError(RuntimeError):
    pass


def chat(endpoint: dict, messages: list[dict], timeout: float, secret: str) -> str:
    """One chat completion from an OpenAI-compatible endpoint (the rollout's
    interception endpoint, authorized by the rollout secret)."""
    body = {"model": endpoint["model"], "messages": messages, **endpoint.get("sampling", {})}
    headers = {"Content-Type": "application/json"}
    if secret:
        headers["Authorization"] = f"Bearer {secret}"
    url = endpoint["base_url"].rstrip("/") + "/chat/completions"
    try:
        data = json.loads(_post(url, json.dumps(body).encode(), headers, timeout, 16 << 20, mark_retries=True))
    except HTTPStatusError as exc:
        raise EndpointError(f"model call failed: HTTP {exc.code}{_endpoint_said(exc)}") from None
    except TRANSIENT as exc:
        raise EndpointError(f"endpoint unreachable or too slow: {exc}") from None
    except (ValueError, RecursionError):  # invalid UTF-8 is a ValueError too
        raise EndpointError("endpoint answered with something that is not JSON") from None
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise EndpointError("endpoint answer has no choices[0].message.content") from None
    if content is None:  # no text (the study's program reads it as ""): the model's empty reply
        return ""
    if not isinstance(content, str):
        raise EndpointError("the model's reply is not text")
    return content


RETRY_HEADER = "x-stainless-retry-count"
"""What marks a retried chat completion for verifiers' interception server
(``glyph.vfcompat``, 8.): it answers a marked retry of a turn it committed
with that turn, so a retry never records a second reply."""


def _post(url: str, body: bytes, headers: dict[str, str], timeout: float, cap: int,
          mark_retries: bool = False) -> bytes:
    """POST with a few retries on transient failures (a dropped connection,
    429, any 5xx: verifiers' interception server relays the provider's status
    for this, ``glyph.vfcompat``, 3.); a timeout or any other HTTP error is final. Only idempotent requests come
    here: a chat completion (``mark_retries``: each retry carries ``RETRY_HEADER``),
    a test call named by its ``request`` id, the episode's end report."""
    for attempt in range(RETRIES):
        if mark_retries and attempt:
            headers = {**headers, RETRY_HEADER: str(attempt)}
        try:
            return post(url, body, headers, timeout, cap)
        except HTTPStatusError as exc:
            if not (exc.code == 429 or 500 <= exc.code <= 599) or attempt == RETRIES - 1:
                raise
        except TimeoutError:
            raise
        except TRANSIENT:
            if attempt == RETRIES - 1:
                raise
        time.sleep(0.5 * 2 ** attempt)
    raise AssertionError("unreachable")


SANDBOX_CHOICES = ("auto", "auto-or-bare", "namespaces", "userns", "confined", "bare")
"""What ``tester.sandbox`` may name for the ``"local"`` tester: a mode of
``glyph.sandbox.Sandbox`` (``auto`` never falls back to ``bare``: when no
isolating mode starts, every python_test is a tester fault), or
``auto-or-bare``: ``auto``, and ``bare`` when no isolating mode starts (a
choice the harness makes and explains: ``glyph.envs.mbpp.harness.LOCAL_SANDBOX``).
A spec without it gets ``auto``."""


class LocalGrader:
    """glyph's grader (``glyph.grading.grade``) in this process, on a sandbox
    server of its own, under ``limits`` (``glyph.sandbox.Limits``: CPU
    ``cpu_s``, wall clock ``wall_s``, either reached is ``TIMEOUT``). The
    server starts on the first grading and stops at ``close``. ``record``:
    the sandbox mode that grades and the protections it applies, the harness's
    choice, and why ``auto`` did not start when ``bare`` stands in."""

    def __init__(self, spec: dict, limits: dict) -> None:
        from glyph.sandbox import Limits
        choice = spec.get("sandbox", "auto")
        if choice not in SANDBOX_CHOICES:
            raise RuntimeError(f"tester.sandbox is {choice!r}, not one of {', '.join(SANDBOX_CHOICES)}")
        self.choice = choice
        self.setup = str(spec.get("setup", ""))
        tests = spec.get("tests", [])
        self.tests = tests if isinstance(tests, str) else "\n".join(tests)  # as glyph.envs.mbpp.test_service joins them
        self.limits = Limits(cpu_s=float(limits["cpu_s"]), wall_s=float(limits["wall_s"]))
        from glyph.semantics import SEMANTICS
        if spec.get("semantics", "glyph") not in SEMANTICS:
            raise RuntimeError(f"tester.semantics is {spec.get('semantics')!r}, not one of "
                               f"{', '.join(SEMANTICS)}")
        self.semantics = SEMANTICS[spec.get("semantics", "glyph")]
        self.sandbox = None
        self.record: dict | None = None

    def _start(self):
        from glyph.sandbox import Sandbox, SandboxUnavailable
        sandbox = Sandbox(mode="auto" if self.choice == "auto-or-bare" else self.choice)
        fallback = None
        try:
            info = sandbox.protections()
        except SandboxUnavailable as exc:
            if self.choice != "auto-or-bare":
                raise
            fallback = str(exc)
            sandbox = Sandbox(mode="bare")
            info = sandbox.protections()
        self.sandbox = sandbox
        self.record = dict(info.record(), choice=self.choice, **({"fallback": fallback} if fallback else {}))
        return sandbox

    def __call__(self, source: str) -> str:
        from glyph.grading import grade
        sandbox = self.sandbox or self._start()
        return grade(source, self.setup, self.tests, limits=self.limits, sandbox=sandbox,
                     semantics=self.semantics).outcome.value

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()


class Tester:
    """Runs the visible tests on a candidate and returns its outcome class,
    under ``limits`` (``{"cpu_s", "wall_s"}``). Any failure is a ``TesterFault``
    (the episode passes it on; the program ends ``tester_error``, exit 98)."""

    def __init__(self, spec: dict, secret: str, limits: dict) -> None:
        self.spec, self.secret = spec, secret
        self.cpu_s, self.wall_s = float(limits["cpu_s"]), float(limits["wall_s"])
        self.calls = 0
        self.local: LocalGrader | None = None

    def __call__(self, source: str, shadow: bool) -> str:
        self.calls += 1
        if self.spec["kind"] == "service":
            request = f"{self.calls}:{'shadow' if shadow else 'visible'}:{sha256(source)}"
            body = json.dumps({"secret": self.secret, "request": request, "source": source,
                               "shadow": shadow}).encode()
            try:
                outcome = json.loads(_post(self.spec["url"], body, {"Content-Type": "application/json"},
                                           2 * self.wall_s + 30, 1 << 16))["outcome"]
            except HTTPStatusError as exc:
                raise TesterFault(f"the test service answered HTTP {exc.code}: {_error_body(exc)}") from None
            except (*TRANSIENT, ValueError, KeyError, TypeError, RecursionError) as exc:
                raise TesterFault(f"the test service failed: {exc}") from None
        else:
            try:
                if self.local is None:
                    self.local = LocalGrader(self.spec, {"cpu_s": self.cpu_s, "wall_s": self.wall_s})
                outcome = self.local(source)
            except Exception as exc:  # deliberate: a grader fault is the tester's, never an outcome
                raise TesterFault(f"the grader failed: {type(exc).__name__}: {exc}"[:2000]) from None
        if outcome not in Outcome.__members__:
            raise TesterFault(f"the tester answered {outcome!r}")
        return outcome

    @property
    def sandbox(self) -> dict | None:
        """The local grader's sandbox record (``LocalGrader.record``), once it graded."""
        return self.local.record if self.local is not None else None

    def close(self) -> None:
        if self.local is not None:
            self.local.close()


def own_words(message: str) -> str:
    """An error message with a wrapped JSON error body reduced to the inner
    message, the endpoint's own words: verifiers' interception server and its
    client wrap an upstream's answer as ``upstream 404: {"error": {"message":
    ...}}`` (verifiers/v1/clients/eval.py:156-167, passed on by
    v1/interception/server.py:944); anything else as it is."""
    head, sep, body = message.partition(": ")
    try:
        inner = json.loads(body)["error"]["message"] if sep else None
    except Exception:  # not a JSON error body: the message as it is
        inner = None
    return f"{head}: {inner}" if isinstance(inner, str) else message


def _endpoint_said(exc: HTTPStatusError) -> str:
    """``": <message>"``: what an endpoint's OpenAI-shaped error body
    (``{"error": {"message": ...}}``) says, in its own words (``own_words``);
    at most 500 characters; "" for no readable body."""
    try:
        message = json.loads(exc.read(1 << 16))["error"]["message"]
    except Exception:  # deliberate: the status alone still says what failed
        return ""
    if not isinstance(message, str) or not message.strip():
        return ""
    return ": " + own_words(message.strip())[:500]


def _error_body(exc: HTTPStatusError) -> str:
    try:
        return str(json.loads(exc.read(1 << 16)).get("error"))[:500]
    except Exception:  # deliberate: the status alone still says what failed
        return "(no readable body)"


def limits_of(cfg: dict) -> dict:
    """The grading limits the harness passed (``harness.program_config``
    builds every program config, with ``limits``); none is a caller's bug."""
    if not isinstance(cfg.get("limits"), dict):
        raise ValueError("the program config has no 'limits' (build it with glyph.envs.mbpp.harness.program_config)")
    return cfg["limits"]


def read_secret() -> str:
    if os.environ.get("GLYPH_ROLLOUT_SECRET"):
        return os.environ["GLYPH_ROLLOUT_SECRET"]
    path = os.environ.get("GLYPH_SECRET_FILE")
    if path:
        with open(path) as f:
            return f.read().strip()
    return ""


def run(cfg: dict, secret: str, save=None) -> Trace:
    """One episode; never raises: an unexpected failure ends it as
    ``program_error`` with the traceback, keeping what was recorded.
    ``save(trace)`` is called after every turn, so a program killed at the
    rollout's timeout still leaves what it did."""
    profile = profiles.get(cfg["profile"])
    trace = profile.trace_type(arm=cfg.get("arm"), budget=cfg.get("max_tool_calls"),
                               test_cost=cfg.get("test_cost"))
    try:
        _loop(cfg, secret, trace, save or (lambda t: None))
    except Exception:  # deliberate: the trace must still be written, with the fault
        trace.end, trace.error = PROGRAM_ERROR, traceback.format_exc()[-4000:]
    report_end(cfg, secret, trace)
    return trace


def report_end(cfg: dict, secret: str, trace: Trace) -> None:
    """Tell the test service how the episode ended (the service tester only:
    elsewhere there is no trusted side to tell). Never raises: a report that
    did not arrive is recorded as ``report_error`` (the program then exits
    ``TESTER_FAILED``: the trusted side has no record of the end)."""
    spec = cfg.get("tester") or {}
    if spec.get("kind") != "service":
        return
    try:
        body = json.dumps({"secret": secret, "end": trace.end, "turns": trace.turns}).encode()
        _post(spec["end_url"], body, {"Content-Type": "application/json"}, 30, 1 << 16)
    except HTTPStatusError as exc:
        trace.report_error = f"the test service answered HTTP {exc.code}: {_error_body(exc)}"
    except Exception as exc:  # deliberate: any failure is recorded, and the exit says so
        trace.report_error = f"the test service did not take the report: {type(exc).__name__}: {exc}"[:2000]


def _loop(cfg: dict, secret: str, trace: Trace, save) -> None:
    tester = Tester(cfg["tester"], secret, limits_of(cfg))
    try:
        _episode(cfg, secret, trace, save, tester)
    finally:
        if getattr(tester, "sandbox", None):
            trace.tester_sandbox = tester.sandbox
        if hasattr(tester, "close"):
            tester.close()


def _episode(cfg: dict, secret: str, trace: Trace, save, tester) -> None:
    # Every key is the harness's (``harness.program_config``): no default of its own here.
    episode = profiles.get(cfg["profile"]).episode(cfg, trace)
    messages = trace.messages = [dict(m) for m in cfg["messages"]]
    t0 = time.monotonic()
    while True:
        try:
            reply = chat(cfg["endpoint"], messages, float(cfg["model_timeout"]), secret)
        except EndpointError as exc:
            trace.end, trace.error = ENDPOINT_ERROR, str(exc)
            break
        if len(reply) > REPLY_CAP:
            trace.reply_truncated = len(reply)
            reply = reply[:REPLY_CAP]
        context = [dict(m) for m in messages]
        messages.append({"role": "assistant", "content": reply})
        trace.turns += 1
        try:
            step = episode.turn(reply, tester, context)  # raises on no reply: only the tester's faults
        except TesterFault as exc:
            trace.end, trace.error = TESTER_ERROR, str(exc)
            break
        if step is None:
            trace.end = episode.end
            if episode.end == FINAL:
                trace.final = True
            else:
                trace.error = episode.error
            break
        call, status, _ = step
        trace.calls.append(ToolCall(id=call.id, tool=call.tool, status=status))
        messages.append(episode.observation(step))
        trace.budget_left = episode.budget
        save(trace)
    trace.budget_left = episode.budget
    trace.seconds = time.monotonic() - t0


def save_trace(trace: Trace) -> None:
    os.makedirs(".glyph", exist_ok=True)
    tmp = TRACE + ".tmp"
    with open(tmp, "w") as f:
        json.dump(trace.to_json(), f)
    os.replace(tmp, TRACE)


def main() -> int:
    cfg_path = os.environ.get("GLYPH_CONFIG", CONFIG)
    with open(cfg_path) as f:
        cfg = json.load(f)
    trace = run(cfg, read_secret(), save=save_trace)
    save_trace(trace)
    return exit_status(trace)


def exit_status(trace: Trace) -> int:
    """0, or the fault exit for a trace that ended on an endpoint or tester
    fault, or whose end the test service did not take (with its one-line
    reason on stderr)."""
    code = {ENDPOINT_ERROR: ENDPOINT_FAILED, TESTER_ERROR: TESTER_FAILED}.get(trace.end)
    if code is None and trace.report_error:
        print(f"{TESTER_ERROR}: could not report the end ({trace.end}): {trace.report_error}", file=sys.stderr)
        return TESTER_FAILED
    if code is None:
        return 0
    print(f"{trace.end}: {trace.error}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
